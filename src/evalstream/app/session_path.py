"""The asyncio side of session windows: hold events, close windows on time, evaluate them.

The message path (``app/message_path.py``) hands every event planned on a session route
to :meth:`SessionPath.hold` instead of starting its evaluations. Each held event is one
piece of its message's tracked work (``OffsetTracker``), so its offset stays incomplete,
and its partition's commits stay behind it, until the session's results are acknowledged
by the broker: delivery stays at-least-once. A timer (:meth:`SessionPath.run`, alive as
long as intake) closes windows that went quiet; each closed window is evaluated once, on
its merged event (``app/sessions.py``), each evaluation within a ``worker.max_in_flight``
slot, and then its members' offsets complete.

A revoke or a stop abandons the open windows of those partitions (:meth:`abandon`): their
members are never committed, so they are redelivered and windowed again by the next owner.
Windows already closed are evaluations under way, drained as any other.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Collection, Sequence
from typing import Any

import structlog

from evalstream.app.bindings import Planned
from evalstream.app.commits import Committer
from evalstream.app.inflight import InFlight
from evalstream.app.offsets import TP, OffsetTracker, PartitionState
from evalstream.app.outputs import Outputs
from evalstream.app.pipeline import Pipeline
from evalstream.app.publish_result import ResultPublisher, with_details
from evalstream.app.sessions import (
    REASONS,
    Closed,
    Member,
    SessionStore,
    Window,
    footprint,
    stand_in_details,
)
from evalstream.config import Settings
from evalstream.errors import SinkError
from evalstream.events import Record, TraceEvent
from evalstream.judges.waits import WAIT_SCOPE
from evalstream.logging import LogLimits, get_logger
from evalstream.metrics import Metrics

__all__ = ["SessionPath"]

log = get_logger(__name__)

#: The timer never sleeps less than this (a burst of windows due together closes at once).
_MIN_SLEEP_S = 0.005


class SessionPath:
    """Session windows of the routes with ``session:``; built by :meth:`build`.

    Args:
        store: The windows.
        metrics: ``evalstream_sessions_open`` / ``evalstream_sessions_closed_total``.
        pipeline: Runs and records the evaluations of a closed window.
        outputs: Where its results go.
        tracker: Whose offsets its members complete (or abandon).
        committer: Told when work completes.
        slots: The bound on in-flight evaluations.
        fail: Called when output cannot be made durable (the worker then stops).
        clock: Seconds, monotonic (tests inject one); by default ``slots``' reading clock,
            which stands still while intake is paused for backpressure: a session is not
            quiet while its next events wait unread (nor does it age).
    """

    def __init__(self, store: SessionStore, metrics: Metrics, *, pipeline: Pipeline,
                 outputs: Outputs, tracker: OffsetTracker, committer: Committer,
                 slots: InFlight, fail: Callable[[BaseException], None],
                 clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.routes = store.routes
        self._pipeline = pipeline
        self._outputs = outputs
        self._tracker = tracker
        self._committer = committer
        self._slots = slots
        self._fail = fail
        self._results = ResultPublisher(pipeline, outputs, fail)
        self._clock = slots.reading_clock if clock is None else clock
        #: Whether the clock stands still while intake is paused (the default).
        self._still_when_paused = clock is None
        self._closed = {(route, reason): metrics.sessions_closed.labels(route, reason).inc
                        for route in self.routes for reason in REASONS}
        for route in self.routes:
            metrics.sessions_open.labels(route).set_function(
                lambda route=route: store.open_count(route))  # type: ignore[misc]
        #: Closed windows' evaluations under way (the message path drains them too).
        self.tasks: set[asyncio.Task[None]] = set()
        #: ``session_merge_failed`` per route: a merge bug repeats on every session.
        self._merge_logs: LogLimits[str] = LogLimits()

    @classmethod
    def build(cls, settings: Settings, metrics: Metrics, *, pipeline: Pipeline,
              outputs: Outputs, tracker: OffsetTracker, committer: Committer, slots: InFlight,
              fail: Callable[[BaseException], None]) -> SessionPath | None:
        """The session path of ``settings``, or None when no route has a session window
        (then nothing here is on the message path at all)."""
        windows = {r.name: r.session for r in settings.routes if r.session is not None}
        if not windows:
            return None
        store = SessionStore(windows, settings.worker.max_message_bytes)
        return cls(store, metrics, pipeline=pipeline, outputs=outputs, tracker=tracker,
                   committer=committer, slots=slots, fail=fail)

    # --- intake -------------------------------------------------------------------------

    def split(self, planned: list[Planned]) -> tuple[list[Planned], dict[str, list[Planned]]]:
        """``planned`` as (evaluations to start now, those of session routes by route)."""
        routes = self.routes
        now: list[Planned] = []
        held: dict[str, list[Planned]] = {}
        for p in planned:
            route = p.bound.route
            if route in routes:
                held.setdefault(route, []).append(p)
            else:
                now.append(p)
        return now, held

    def hold(self, record: Record, state: PartitionState,
             held: Sequence[tuple[TraceEvent, str, tuple[Planned, ...]]], events: int) -> None:
        """Hold each (event, route, evaluations) of ``record`` (one tracked piece each) in
        its window; windows this fills up are evaluated now. ``events`` is how many events
        the message held (they share its bytes)."""
        value = record.value
        size = (len(value) if value is not None else 0) // max(1, events) + 1
        now = self._clock()
        for event, route, planned in held:
            assert event.session_id is not None
            member = Member(event, state.tp, state, record.offset, size, footprint(event))
            for closed in self.store.add(route, event.session_id, planned, member, now):
                self._launch(closed)

    async def run(self) -> None:
        """Close and evaluate windows as they go quiet, until cancelled.

        A window opened later is due no sooner than its route's gap (or max age) from
        now, so sleeping until the next deadline, or the shortest of those, misses none.
        """
        store, clock, slots = self.store, self._clock, self._slots
        shortest = min(store.soonest(route) for route in self.routes)
        while True:
            if slots.paused and self._still_when_paused:
                # Nothing comes due while intake is paused (that clock stands still): wait
                # for reading to resume, not a wake-up every few ms until it does.
                await slots.wait_reading(shortest)
                continue
            now = clock()
            for closed in store.due(now):
                self._launch(closed)
            deadline = store.next_deadline()
            wait = shortest if deadline is None else min(shortest, deadline - now)
            await asyncio.sleep(max(wait, _MIN_SLEEP_S))

    def abandon(self, tps: Collection[TP] | None = None) -> int:
        """Give up the open windows of ``tps`` (all when None): never evaluated here, their
        members' offsets never committed (the partition's next owner redoes them)."""
        windows: list[Window] = self.store.abandon(tps)
        for window in windows:
            self._closed[(window.route, "abandoned")](1)
            self._abandon_members(window.members)
        if windows:
            log.info("sessions_abandoned", sessions=len(windows),
                     events=sum(len(w.members) for w in windows))
        return len(windows)

    def cancel(self) -> None:
        """Cancel the evaluations under way (closing)."""
        for task in list(self.tasks):
            task.cancel()

    # --- evaluation ---------------------------------------------------------------------

    def _launch(self, closed: Closed) -> None:
        self._closed[(closed.window.route, closed.reason)](1)
        task = asyncio.create_task(self._evaluate(closed))
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._finished, closed))

    def _finished(self, closed: Closed, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            # Cancelled (a stop, the drain's deadline, a revoke cancelling a wait at a spend
            # cap): its members never complete. Abandoned, so a revoke does not wait its
            # deadline for them, and never committed past: they are redelivered. Here, not
            # in ``_evaluate``: a task cancelled before its first step never runs its body,
            # and a done callback runs once, so they are abandoned exactly once either way
            # (``OffsetTracker.abandon`` counts pieces: twice would count one piece twice).
            # It runs before whoever awaits the task resumes (their callbacks come later).
            self._abandon_members(closed.members)
        elif (exc := task.exception()) is not None:
            # A bug past ``_one``'s guards: the members would stay incomplete, holding
            # their partitions' commits for good while the worker looked healthy. Stopping
            # it redelivers them instead.
            log.error("session_evaluation_failed", error_type=type(exc).__name__)
            self._fail(exc)

    async def _evaluate(self, closed: Closed) -> None:
        structlog.contextvars.bind_contextvars(
            route=closed.window.route, session_events=len(closed.members))
        try:
            event = closed.event()
            extra = {"session": closed.details()}
        except Exception as exc:  # a bug here must not hold the members' offsets forever
            if (limited := self._merge_logs.fields(closed.window.route)) is not None:
                log.error("session_merge_failed", error_type=type(exc).__name__, **limited)
            event = closed.members[-1].event
            extra = {"session": {"closed": closed.reason, "merge_failed": True}}
        # So a revoke can cancel this session's waits at a judge's spend cap (the tasks
        # gather starts inherit it). A window may span partitions; a rebalance is eager
        # (every partition is revoked at once), so its first member's assignment does.
        WAIT_SCOPE.set(closed.members[0].state)
        # Cancelled, its members are abandoned by ``_finished``.
        runs = [asyncio.create_task(self._one(event, p, extra)) for p in closed.planned]
        try:
            done = await asyncio.gather(*runs)
        except asyncio.CancelledError:
            # One evaluation's wait cancelled (a stop or a revoke) fails the gather but
            # leaves the others running, outside ``tasks``: a drain would not wait for them
            # and they would publish for members abandoned, maybe into a closed sink. This
            # task ends only once none of them runs.
            for run in runs:
                run.cancel()
            await asyncio.gather(*runs, return_exceptions=True)
            raise
        if not all(done):
            return  # the worker is failing: leave the offsets incomplete (redelivered)
        tracker = self._tracker
        for member in closed.members:
            tracker.done(member.state, member.offset)
        self._committer.progressed()

    def _abandon_members(self, members: Sequence[Member]) -> None:
        """Give up ``members``' offsets: never committed here, so redelivered."""
        tracker = self._tracker
        for member in members:
            tracker.abandon(member.state, member.offset, 1)
        self._committer.progressed()

    async def _one(self, event: TraceEvent, planned: Planned, extra: dict[str, Any]) -> bool:
        """Run, publish and count one evaluation of a session (as the message path does
        for an event); False when its output could not be made durable."""
        await self._slots.acquire()
        result = None
        try:
            result = await self._pipeline.run(event, planned)
            if result is not None:
                result = with_details(result, extra)
                await self._outputs.result(result)
                self._results.count(planned, result)
        except SinkError as exc:
            self._fail(exc)
            return False
        except Exception as exc:  # refused for good, or a bug: publish the error instead
            # Without the members' ids: they may be what made the result too large.
            small = {"session": stand_in_details(extra["session"])}
            return await self._results.stand_in(event, planned, exc, small,
                                                judge=None if result is None else result.judge)
        finally:
            self._slots.release()
        return True
