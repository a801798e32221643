"""``evalstream join-labels``: human labels from a topic joined with the published results.

One process (one Deployment, apart from the workers, so worker replicas never count a label
twice) consumes the results topic and ``labels.topic`` in its own consumer group
(``labels.group_id``), joins each label with the result it names in a bounded store
(``app/label_join.py``) and counts the pair in ``evalstream_labels_*``; ``/metrics``,
``/healthz`` and ``/readyz`` are served as by the worker (``server:``).

Offsets (at-least-once): a message is committed once it no longer waits in the store, so a
partition's commit stops at its oldest label or result still waiting for its other half.
After a restart (or when a partition moves to another joiner) what was waiting is read
again and waits again; what was matched or dropped is not. A pair is counted twice
when both its label and its result lay behind an older entry still waiting on their
partitions (a label that came before its result, or one whose result had expired): then
both are read again and meet again; after a crash (no final commit), so is every pair
matched since the last commit. Results wait up to ``labels.retention_s`` (most are
never labelled), so a restart re-reads about that much of the results topic.

Co-partitioning: with several joiners, a label is joined only if it reaches the joiner
holding its result: key labels by the result's ``trace_id`` on a labels topic with as many
partitions as the results topic, placed with evalstream's partitioner (README, "Human
labels"). One joiner needs none of that.

Stopping (SIGTERM, Ctrl-C) takes three steps like the worker's: end intake, (nothing to
drain: a message is handled as it is read), then commit and close within a budget.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from evalstream import __version__
from evalstream.app.bindings import load_plugins
from evalstream.app.checks import check_kafka_clients
from evalstream.app.commits import Committer
from evalstream.app.connect import connect
from evalstream.app.health import (
    HealthServer,
    not_ready_reason,
    watch_connection,
    watch_lag,
    watch_readiness,
)
from evalstream.app.label_join import LABEL_FORMAT, HeldResult, JoinStore, parse_label, slim
from evalstream.app.offsets import TP, OffsetTracker, PartitionState
from evalstream.app.shutdown import close_budget, close_in_order, final_commit
from evalstream.app.signals import catch_stop_signals_early, run_until_stopped
from evalstream.app.waits import SharedDeadline
from evalstream.config import Settings, load_settings
from evalstream.errors import SinkError, SourceError
from evalstream.evaluators import registry
from evalstream.events import Record, read_result
from evalstream.logging import LogLimit, configure_logging, get_logger
from evalstream.metrics import Metrics
from evalstream.sinks.base import Sink
from evalstream.sinks.kafka import KafkaSink
from evalstream.sources.base import Source
from evalstream.sources.kafka import KafkaSource

__all__ = ["LabelJoiner", "add_arguments", "main", "run_joiner"]

log = get_logger(__name__)

#: A token: the offset of a message waiting in the store, and its partition's state.
Token = tuple[PartitionState, int]
_POLL_S = 0.5
_LAG_INTERVAL_S = 5.0
_CONNECTION_CHECK_S = 5.0
#: When a topic of no partition here is warned about (the group has settled by then).
_TOPIC_WARNING_S = 60.0
#: The dead-letter reason of a label message that is not a label.
INVALID_LABEL = "invalid_label"


def evaluator_table(settings: Settings) -> dict[tuple[str, str], tuple[str, bool]]:
    """(route, evaluator name) -> (its judge's configured name, is a label evaluator).

    Raises:
        ConfigError: a plugin cannot be imported, an evaluator is unknown or its params are
            invalid (naming the field, as the workers do: a config they refuse is refused).
    """
    load_plugins(settings.plugins)
    table = {}
    for ri, route in enumerate(settings.routes):
        for ei, spec in enumerate(route.evaluators):
            registry.params_for(spec, where=f"routes[{ri}] ({route.name}) evaluators[{ei}]")
            is_label = registry.get(spec.evaluator).is_label_evaluator
            table[(route.name, spec.label)] = (spec.judge, is_label)
    return table


class LabelJoiner:
    """The joiner process's parts; usable in-process (tests).

    Args:
        settings: The worker's configuration (``labels:``, ``kafka:``, ``topics:``, routes).
        registry: Prometheus registry (a fresh one when None).
        source: Where results and labels come from; a Kafka consumer group when None.
        sink: Where undecodable labels are dead-lettered; a Kafka producer when None.
    """

    def __init__(self, settings: Settings, *, registry: CollectorRegistry | None = None,
                 source: Source | None = None, sink: Sink | None = None) -> None:
        self.settings = settings
        labels = settings.labels
        self.group_id = settings.labels_group_id
        self.topics = (settings.topics.results, labels.topic)
        self.evaluators = evaluator_table(settings)
        self.metrics = Metrics(registry)
        self.metrics.build_info.info({"version": __version__})
        kafka = settings.kafka.model_copy(update={"group_id": self.group_id,
                                                  "start_from": None})
        self.source: Source = source if source is not None else KafkaSource(
            kafka, list(self.topics))
        # Dead letters only: not the OTel copy of results (the workers' output), whose topic
        # start-up would otherwise require here too.
        outputs = settings.topics.model_copy(update={"otel_results": ""})
        self.sink: Sink = sink if sink is not None else KafkaSink(kafka, outputs)
        self.tracker = OffsetTracker()
        self.committer = Committer(self.tracker, self.source, self.metrics)
        self.store: JoinStore[Token] = JoinStore(
            self.metrics, self._release, retention_s=labels.retention_s,
            max_results=labels.max_results, max_labels=labels.max_labels)
        self.health = HealthServer(settings.server.host, settings.server.port,
                                   self.metrics.registry, self.not_ready)
        self._stop = asyncio.Event()
        self._started = False
        #: Bumped by every rebalance: the rest of a batch taken before one is not joined.
        self._generation = 0
        #: A topic of garbage must not log a line per message (each is counted).
        self._invalid_logs = LogLimit()

    def not_ready(self) -> str | None:
        """Why the joiner is not ready, or None when it is."""
        return not_ready_reason(stopping=self._stop.is_set(), started=self._started,
                                source=self.source)

    def request_stop(self) -> None:
        """Begin a graceful stop (safe from a signal handler, idempotent)."""
        self._stop.set()

    # --- rebalance --------------------------------------------------------------------

    async def on_assigned(self, tps: Sequence[TP]) -> None:
        """Track the new partitions."""
        self._generation += 1
        self.tracker.assign(tps)
        log.info("partitions_assigned", partitions=[f"{t}:{p}" for t, p in sorted(tps)])

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        """Commit up to the oldest waiting entry, then forget the partitions' entries (their
        next owner reads what waited again)."""
        self._generation += 1
        await self.committer.commit(tps)
        self.tracker.revoke(tps)  # first: dropping releases tokens, now of no partition
        self.store.drop_parts(set(tps))
        self._gauges()
        log.info("partitions_revoked", partitions=[f"{t}:{p}" for t, p in sorted(tps)])

    # --- the join -----------------------------------------------------------------------

    def _release(self, token: Token) -> None:
        part, offset = token
        self.tracker.done(part, offset)
        self.committer.progressed()

    def _held(self, value: bytes | None) -> HeldResult | str:
        """The result to hold, or why it is ignored."""
        try:
            result = read_result(value or b"")
        except (ValidationError, ValueError):
            return "undecodable"
        if result.canary:
            # Planted with its own gold answer, compared by the worker (canary metrics):
            # held, it would wait retention_s for a label that never comes, holding the
            # commit back, or mix a synthetic event into the human-label figures.
            return "canary"
        known = self.evaluators.get((result.route, result.evaluator))
        if known is None:  # an older config's, or another deployment's: labels unbounded
            return "unknown_evaluator"
        judge, is_label = known
        return HeldResult(result.route, result.evaluator, judge, is_label, slim(result))

    async def take(self, tp: TP, record: Record, now: float) -> None:
        """Join one message of ``tp`` (a result or a label)."""
        part = self.tracker.track(tp, record.offset, 1)
        if part is None:
            return  # revoked meanwhile
        token = (part, record.offset)
        if tp[0] == self.topics[1]:
            label = parse_label(record.value)
            if label is None:
                await self._invalid_label(record, token)
            else:
                self.store.add_label(label, tp, token, now)
            return
        held = self._held(record.value)
        if isinstance(held, str):
            self.metrics.labels_ignored.labels("result", held).inc()
            self._release(token)
        else:
            self.store.add_result(held, tp, token, now)

    async def _invalid_label(self, record: Record, token: Token) -> None:
        # Counted and dead-lettered, never logged with its content (a label may quote it).
        self.metrics.labels_ignored.labels("label", "undecodable").inc()
        if (fields := self._invalid_logs.fields()) is not None:
            log.warning("invalid_label", topic=record.topic, partition=record.partition,
                        offset=record.offset, size=len(record.value or b""), **fields)
        await self.sink.publish_dead_letter(record, INVALID_LABEL, f"not {LABEL_FORMAT}")
        self.metrics.dead_letters.labels(INVALID_LABEL).inc()
        self._release(token)

    def _gauges(self) -> None:
        for kind, n in self.store.waiting().items():
            self.metrics.labels_pending.labels(kind).set(n)

    async def consume(self) -> None:
        """Poll, join and expire until cancelled."""
        loop = asyncio.get_running_loop()
        max_records = self.settings.kafka.max_poll_records
        while True:
            batch = await self.source.poll(_POLL_S, max_records)
            generation = self._generation
            for tp, records in batch.items():
                now = loop.time()
                for record in records:
                    if generation != self._generation:
                        # Rebalanced while a dead letter was sent: the partitions were
                        # rewound to their commits, so the rest is fetched again. Taken now
                        # into their fresh state, it would be tracked twice and out of
                        # order (a KeyError in ``done``, or a commit past a waiting entry).
                        break
                    await self.take(tp, record, now)
                self.metrics.messages_consumed.labels(tp[0]).inc(len(records))
            self.store.expire(loop.time())
            self._gauges()

    async def watch_topics(self, after_s: float) -> None:
        """Warn once when, ``after_s`` into the run, a topic has no partition here.

        A labels topic that does not exist (a typo, auto-creation off) is only never
        assigned: without this the joiner would look healthy and count nothing. (With more
        joiners than a topic's partitions, some legitimately hold none: a warning, not a
        failure.)
        """
        await asyncio.sleep(after_s)
        held = {topic for topic, _ in self.source.assignment()}
        missing = [topic for topic in self.topics if topic not in held]
        if missing:
            log.warning("topics_not_assigned", topics=missing, waited_s=after_s,
                        advice="does the topic exist? (one joiner per partition at most)")

    # --- lifecycle ----------------------------------------------------------------------

    async def run(self, ready_event: asyncio.Event | None = None) -> int:
        """Run until :meth:`request_stop`; return the exit code (0 clean, 1 failed)."""
        log.info("label_joiner_starting", version=__version__, group_id=self.group_id,
                 results=self.topics[0], labels=self.topics[1])
        try:
            await self.health.start()
            await connect(self.sink, self.source, self, self.settings.kafka, self._stop)
        except (SourceError, SinkError, OSError) as exc:
            log.error("label_joiner_start_failed", error=str(exc))
            await self._close(SharedDeadline(10.0, 5.0, 0.2))
            return 1
        self._started = not self._stop.is_set()
        tasks = [asyncio.create_task(self.committer.run(
                     self.settings.worker.commit_interval_s), name="commit"),
                 asyncio.create_task(watch_lag(self.source, self.metrics, _LAG_INTERVAL_S)),
                 asyncio.create_task(watch_connection(self.source, _CONNECTION_CHECK_S))]
        consume = asyncio.create_task(self.consume(), name="consume")
        consume.add_done_callback(lambda _: self._stop.set())
        tasks.append(asyncio.create_task(watch_readiness(
            self.not_ready, self.metrics, ready_event, list(self.topics)), name="ready"))
        tasks.append(asyncio.create_task(self.watch_topics(_TOPIC_WARNING_S), name="topics"))
        log.info("label_joiner_started", port=self.health.port)
        await self._stop.wait()
        # 1. End intake. 2. Nothing to drain: each message is handled as it is read.
        self.metrics.ready.set(0)
        consume.cancel()
        failure: BaseException | None = None
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await consume
            except Exception as exc:  # a SinkError (dead letter) or a source failure
                failure = exc
                log.error("label_joiner_failed", error=str(exc))
        # 3. Commit what no longer waits, then close, within one budget.
        budget = close_budget()
        await final_commit(self.committer, budget)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._close(budget)
        code = 0 if failure is None else 1
        log.info("label_joiner_stopped", exit_code=code, waiting=self.store.waiting())
        return code

    async def _close(self, budget: SharedDeadline) -> None:
        await close_in_order((self.source.stop, self.sink.stop, self.health.stop), budget)


async def run_joiner(settings: Settings, *, registry: CollectorRegistry | None = None,
                     ready_event: asyncio.Event | None = None,
                     handle_signals: bool = True) -> int:
    """Run a label joiner until SIGTERM/SIGINT; return the exit code.

    Raises:
        ConfigError: the configuration is invalid (before anything connects).
    """
    async def build() -> LabelJoiner:
        # An option aiokafka refuses is a config error (exit 2) before anything connects.
        await check_kafka_clients(settings)
        return LabelJoiner(settings, registry=registry)

    return await run_until_stopped(build, ready_event, handle_signals=handle_signals)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``join-labels`` options."""
    parser.add_argument("--config", "-c",
                        help="the workers' YAML config file (EVALSTREAM_* env vars override)")


def main(args: argparse.Namespace) -> int:
    """``evalstream join-labels``: exit 0 when stopped, 1 on failure, 2 on a config error.

    Raises:
        ConfigError: the configuration is invalid (the command line prints it, exit 2).
    """
    # A SIGTERM while starting stops it cleanly rather than killing it (as ``run``).
    with catch_stop_signals_early():
        settings = load_settings(args.config)
        configure_logging(settings.logging.level, settings.logging.format)
        return asyncio.run(run_joiner(settings))
