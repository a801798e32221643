"""The streaming worker's lifecycle: build, connect, readiness, rebalances, stop.

Lifecycle (``Worker.run``): start the HTTP server (so /healthz answers while the broker is
still being reached), then connect the sink, then the source (retried while the broker is
unreachable, ``app/connect.py``); run the message path (the consume loop,
``app/message_path.py``), the commit loop, the lag / connection / readiness watchers and
the observers until stopped; then stop in three steps: end intake, drain in-flight work up
to ``worker.shutdown_timeout_s``, then finish within one shared budget
(``app/shutdown.py``): the observers' last step, flush the producer, commit, and close
everything in reverse start order.

The worker is the source's rebalance handler: each assignment or revocation starts a new
generation of the message path; a revoke first gives the partitions' in-flight work a
bounded time to finish, then commits them. How messages become results, dead letters and
committed offsets (at-least-once, with backpressure) is told in ``app/message_path.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from evalstream import __version__
from evalstream.app.caught_up import CaughtUp, watch_caught_up
from evalstream.app.checks import check_kafka_clients, check_pipeline, check_route_topics
from evalstream.app.commits import Committer
from evalstream.app.connect import connect
from evalstream.app.health import (
    HealthServer,
    not_ready_reason,
    watch_connection,
    watch_lag,
    watch_readiness,
)
from evalstream.app.inflight import InFlight
from evalstream.app.intake import Intake
from evalstream.app.message_path import MessagePath
from evalstream.app.observers import ResultObserver, drift_observer, run_observer
from evalstream.app.offsets import TP, OffsetTracker
from evalstream.app.outputs import Outputs
from evalstream.app.pipeline import Pipeline
from evalstream.app.session_path import SessionPath
from evalstream.app.shutdown import (
    close_budget,
    close_in_order,
    final_commit,
    finish_observers,
    flush_sink,
    stop_judge_waits,
)
from evalstream.app.signals import run_until_stopped
from evalstream.app.waits import SharedDeadline
from evalstream.config import Settings
from evalstream.errors import ConfigError, SinkError, SourceError
from evalstream.judges.base import Judge
from evalstream.judges.registry import build_judges, close_judges
from evalstream.logging import get_logger
from evalstream.metrics import Metrics
from evalstream.sinks.base import Sink
from evalstream.sinks.kafka import KafkaSink
from evalstream.sources.base import Source
from evalstream.sources.kafka import KafkaSource

__all__ = ["Worker", "run_worker"]

log = get_logger(__name__)

_LAG_INTERVAL_S = 1.0
#: How often ``--until-caught-up`` checks whether every partition is done.
_CAUGHT_UP_INTERVAL_S = 0.5
#: How often the broker is asked whether it still answers (readiness follows the answer).
_CONNECTION_CHECK_S = 5.0
_UNASSIGNED_WARNING_S = 60.0
#: Allocations (net of frees) between young-generation collections, from start-up on (the
#: interpreter's default is 700). What an evaluation holds while it is in flight (its task,
#: coroutine frames, ack future, the result being built) rises and falls by thousands of
#: objects with the in-flight work, freed by reference counting, not by the collector: at
#: 700 that set off a collection every ~30 evaluations that found next to nothing, ~4% of
#: the CPU per evaluated event (bench/evaluate_path.py). Cyclic garbage is still collected,
#: after at most this many more objects.
_GC_YOUNG_THRESHOLD = 10_000


class Worker:
    """One worker process: builds every part, composes the message path with the background
    tasks, answers rebalances and readiness, and stops. Usable in-process (tests, the demo).

    Everything that can fail on configuration (judges, evaluators, decoders) is built in
    the constructor, so a bad config raises ``ConfigError`` before any connection is made.

    Args:
        settings: The configuration.
        registry: Prometheus registry for the metrics (a fresh one when None).
        judges: Judges by name; built from ``settings.judges`` when None (and then closed
            by the worker).
        source: Where messages come from; a Kafka consumer group when None.
        sink: Where outputs go; a Kafka producer when None.
        observers: Extra result observers (the drift monitor is added when enabled).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        registry: CollectorRegistry | None = None,
        judges: Mapping[str, Judge] | None = None,
        source: Source | None = None,
        sink: Sink | None = None,
        observers: Sequence[ResultObserver] = (),
        until_caught_up: bool = False,
    ) -> None:
        check_route_topics(settings)
        self.settings = settings
        self.metrics = Metrics(registry)
        self.metrics.build_info.info({"version": __version__})
        self._own_judges = judges is None
        self.judges: dict[str, Judge] = (
            dict(judges) if judges is not None else build_judges(settings.judges, self.metrics))
        self.pipeline = Pipeline(settings, self.judges, self.metrics)
        for warning in check_pipeline(settings, self.pipeline):
            log.warning("config_does_nothing", warning=warning)
        self.intake = Intake(settings, self.pipeline, self.metrics)
        self.source: Source = source if source is not None else KafkaSource(
            settings.kafka, [t.topic for t in settings.inputs])
        monitor = drift_observer(settings, self.metrics)
        self.sink: Sink = sink if sink is not None else KafkaSink(
            settings.kafka, settings.topics, alerts=monitor is not None or bool(observers))
        self.observers: list[ResultObserver] = list(observers)
        if monitor is not None:
            self.observers.append(monitor)
        self.outputs = Outputs(self.sink, self.metrics, self.observers)
        self.health = HealthServer(settings.server.host, settings.server.port,
                                   self.metrics.registry, self.not_ready)
        self.tracker = OffsetTracker()
        self.committer = Committer(self.tracker, self.source, self.metrics)
        #: ``run --until-caught-up``: stop once every partition is done up to its end.
        self.caught_up = CaughtUp(self.source, self.tracker) if until_caught_up else None

        self.slots = InFlight(settings.worker.max_in_flight, self.source, self.metrics)
        #: None unless a route has a session window (``app/session_path.py``).
        self.sessions = SessionPath.build(
            settings, self.metrics, pipeline=self.pipeline, outputs=self.outputs,
            tracker=self.tracker, committer=self.committer, slots=self.slots, fail=self._fail)
        self.message_path = MessagePath(
            max_poll_records=settings.kafka.max_poll_records, source=self.source,
            intake=self.intake, pipeline=self.pipeline, outputs=self.outputs,
            tracker=self.tracker, committer=self.committer, slots=self.slots, fail=self._fail,
            sessions=self.sessions)
        self._stop = asyncio.Event()
        self._observers_stop = asyncio.Event()
        self._closing = False
        self._started = False
        self._fatal: BaseException | None = None

    # --- public -----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Evaluations started and not finished."""
        return self.slots.count

    @property
    def in_flight_peak(self) -> int:
        """The highest in-flight count seen."""
        return self.slots.peak

    def is_ready(self) -> bool:
        """Started, the broker answered the source's last check, partitions assigned, and
        not shutting down."""
        return self.not_ready() is None

    def not_ready(self) -> str | None:
        """Why the worker is not ready, or None when it is (what /readyz tells on-call)."""
        return not_ready_reason(stopping=self._stop.is_set(), started=self._started,
                                source=self.source)

    def request_stop(self) -> None:
        """Begin a graceful stop (safe to call from a signal handler, idempotent)."""
        self._stop.set()

    async def run(self, ready_event: asyncio.Event | None = None) -> int:
        """Run until :meth:`request_stop`; return the process exit code (0 clean, 1 failed,
        or stopped before it caught up with ``until_caught_up``)."""
        log.info("worker_starting", version=__version__,
                 inputs=[t.topic for t in self.settings.inputs],
                 routes=[r.name for r in self.settings.routes],
                 max_in_flight=self.slots.limit)
        try:
            # Health first: /healthz answers while the broker is still being reached, so
            # the orchestrator waits (readiness stays false) instead of restarting us.
            await self.health.start()
            await connect(self.sink, self.source, self, self.settings.kafka, self._stop)
        except (SourceError, SinkError, OSError) as exc:
            log.error("worker_start_failed", error=str(exc))
            await self._close()
            return 1
        except ConfigError:  # aiokafka refused an option: exit 2 (the CLI prints it)
            await self._close()
            raise
        if self._stop.is_set():  # stopped while still starting: nothing was consumed
            await self._close()
            code = self._unfinished_job_code(0)
            log.info("worker_stopped_while_starting", exit_code=code,
                     reason="stop requested before the worker was ready; nothing consumed")
            return code
        self._started = True
        background = [
            asyncio.create_task(self.committer.run(self.settings.worker.commit_interval_s),
                                name="commit"),
            asyncio.create_task(watch_lag(self.source, self.metrics, _LAG_INTERVAL_S,
                                          self.tracker.unfinished), name="lag"),
            asyncio.create_task(watch_connection(self.source, _CONNECTION_CHECK_S),
                                name="connection"),
            asyncio.create_task(watch_readiness(
                self.not_ready, self.metrics, ready_event,
                [t.topic for t in self.settings.inputs], _UNASSIGNED_WARNING_S), name="ready"),
        ]
        observer_tasks = [
            asyncio.create_task(run_observer(obs, self.outputs.alert, self._observers_stop,
                                             self._fail, self.metrics), name=f"observer-{i}")
            for i, obs in enumerate(self.observers)
        ]
        if self.caught_up is not None:
            background.append(asyncio.create_task(
                watch_caught_up(self.caught_up, self.request_stop, _CAUGHT_UP_INTERVAL_S),
                name="caught-up"))
        consume = asyncio.create_task(self.message_path.consume(), name="consume")
        # A task that ends with an exception stops the worker. The background ones too:
        # unsupervised, a dead commit loop froze the commits, a dead caught-up check left
        # a Job running for ever, each silently (the stop's gather discarded the error).
        for task in (consume, *background):
            task.add_done_callback(self._task_done)
        log.info("worker_started", port=self.health.port)
        await self._stop.wait()
        code = self._unfinished_job_code(
            await self._shutdown(consume, background, observer_tasks))
        log.info("worker_stopped", exit_code=code)
        return code

    # --- rebalance (RebalanceHandler) ---------------------------------------------------

    async def on_assigned(self, tps: Sequence[TP]) -> None:
        """Track the new partitions; keep them paused while intake is paused."""
        self.message_path.rebalanced()
        self.tracker.assign(tps)
        self.slots.assigned()
        if self.caught_up is not None:  # their ends, before more is written
            await self.caught_up.assigned(tps)
        log.info("partitions_assigned", partitions=[f"{t}:{p}" for t, p in sorted(tps)])

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        """Give in-flight work of ``tps`` a bounded time to finish, commit, forget them.
        Their open session windows are abandoned at once (redelivered to the next owner)."""
        self.message_path.rebalanced(revoked=tps)
        # Evaluations of these partitions waiting at a judge's spend cap (on_spend_cap:
        # wait) have sent nothing and could wait hours: the partitions' next owner does
        # them. Cancelled, rather than waited for here and then evaluated twice; so are
        # those of these assignments that reach a cap later (their states are the scopes).
        stop_judge_waits(self.judges.values(), self.tracker.states(tps))
        if not self._closing:
            deadline = min(self.settings.worker.shutdown_timeout_s,
                           self.settings.kafka.session_timeout_ms / 2000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(deadline):
                    await self.committer.until_idle(tps)
        abandoned = self.tracker.pending(tps)
        await self.committer.commit(tps)
        self.tracker.revoke(tps)
        log.info("partitions_revoked", partitions=[f"{t}:{p}" for t, p in sorted(tps)],
                 abandoned=abandoned)

    def _fail(self, exc: BaseException) -> None:
        """Output cannot be made durable: stop (uncommitted work is redelivered later)."""
        if self._fatal is None:
            log.error("worker_failed", error=str(exc))
            self._fatal = exc
        self._stop.set()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail(exc)

    # --- shutdown -----------------------------------------------------------------------

    def _unfinished_job_code(self, code: int) -> int:
        """``code``, or 1 for a ``--until-caught-up`` Job stopped before it caught up.

        A Kubernetes Job counts exit 0 as complete: a backfill stopped half-way (SIGTERM
        from a node drain, an eviction) must fail its pod, so the Job runs it again (it
        resumes from its commits), rather than end with the rest of the window unscored.
        """
        if code != 0 or self.caught_up is None or self.caught_up.finished:
            return code
        log.warning("stopped_before_caught_up", exit_code=1, ends=self.caught_up.ends())
        return 1

    async def _shutdown(self, consume: asyncio.Task[None], background: list[asyncio.Task[None]],
                        observer_tasks: list[asyncio.Task[None]]) -> int:
        log.info("worker_stopping", in_flight=self.slots.count)
        self.metrics.ready.set(0)
        # 1. End intake: nothing new is taken; what was taken and not started stays
        #    uncommitted and is redelivered.
        consume.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await consume
        with contextlib.suppress(Exception):
            self.source.pause()
        # 2. Drain in-flight work up to the deadline. Evaluations waiting at a judge's
        #    spend cap (on_spend_cap: wait) could wait hours: they are cancelled now, left
        #    uncommitted and redelivered, rather than holding the drain to its deadline.
        stop_judge_waits(self.judges.values())
        if self._fatal is None:
            await self.message_path.drain(self.settings.worker.shutdown_timeout_s)
        # 3. Finish: every step from here on shares one budget (``app/shutdown.py``).
        #    The observers take their last step (the drift monitor resolves its alerts).
        budget = close_budget()
        self._observers_stop.set()
        await finish_observers(observer_tasks, budget)
        #    Flush the producer, then commit what is durable.
        if self._fatal is None:
            await flush_sink(self.sink, budget, self._fail)
        await final_commit(self.committer, budget)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await self._close(budget)
        return 0 if self._fatal is None else 1

    async def _close(self, budget: SharedDeadline | None = None) -> None:
        """Stop the source, the sink and the HTTP server (reverse start order), then release
        the evaluators and the judges the worker built, each step within what is left of
        ``budget`` (a fresh one when the worker never got going: nothing spent any)."""
        self._closing = True
        if budget is None:
            budget = close_budget()
        self.message_path.cancel()

        async def close_own_judges() -> None:
            if self._own_judges:
                await close_judges(self.judges)

        await close_in_order((self.source.stop, self.sink.stop, self.health.stop,
                              self.pipeline.aclose, close_own_judges), budget)


async def run_worker(settings: Settings, *, registry: CollectorRegistry | None = None,
                     ready_event: asyncio.Event | None = None,
                     handle_signals: bool = True, **worker_options: Any) -> int:
    """Run a worker until SIGTERM/SIGINT (or a fatal output failure); return the exit code.

    Args:
        settings: The configuration.
        registry: Prometheus registry (a fresh one when None).
        ready_event: Set once the worker is connected and has partitions.
        handle_signals: SIGTERM/SIGINT set the stop event (second SIGINT exits
            at once), from before the worker is built. Only possible in the main thread.
        **worker_options: Passed to :class:`Worker` (judges, source, sink, observers,
            until_caught_up).

    Raises:
        ConfigError: the configuration is invalid (before anything connects).
    """
    async def build() -> Worker:
        # Before anything connects: an option aiokafka refuses is a config error (exit 2),
        # not a failure after the first client has started.
        await check_kafka_clients(settings)
        worker = Worker(settings, registry=registry, **worker_options)
        # Everything built so far (modules, models, lexicons) lives as long as the process:
        # moving it out of the collector's generations keeps full collections cheap.
        gc.freeze()
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(_GC_YOUNG_THRESHOLD, older, oldest)
        return worker

    # Signals are handled from before the worker is built (plugins, models, lexicons take
    # a while): a SIGTERM meanwhile stops it, not kills it.
    return await run_until_stopped(build, ready_event, handle_signals=handle_signals)
