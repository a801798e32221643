"""The message path: poll, decode, sample, dispatch evaluations, dead-letter, track offsets.

``MessagePath.consume`` polls the source and hands each batch through intake (the sampling
shortcuts, then ``Intake.decode``); each event's planned evaluations run as tasks, their
results go out through ``Outputs`` (or the error results standing in for them,
``app/publish_result.py``); a message that cannot be decoded is dead-lettered
(``app/dead_letters.py``). The lifecycle around it (connecting, rebalance callbacks, the
three-step stop) is the ``Worker``'s (``app/worker.py``), which builds the parts used here
and drains what is left under way with :meth:`MessagePath.drain`.

Delivery is at-least-once. A message's offset completes when every result of it (or its
dead letter) has been acknowledged by the broker, or when it produced no work (skipped);
commits go only up to the lowest incomplete offset per partition (``OffsetTracker``).
In-flight evaluations are bounded by ``worker.max_in_flight`` slots (``InFlight``); when
none is free the consumer pauses its partitions instead of buffering.

Every rebalance starts a new generation (:meth:`MessagePath.rebalanced`): work taken
before it is not started after it, since the partition may now be someone else's (or
ours again with fresh state), and its offsets are redone by the new owner.

On a route with a session window, an event with a ``session_id`` is held instead of
evaluated (``app/session_path.py``): it stays a tracked piece of its message's work until
its session's results are durable. Without such a route the dispatch is the one it was
before session windows existed (chosen once, in the constructor).

This is the hot path: collaborators are looked up once per batch into locals, never per
message.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

import structlog

from evalstream.app.bindings import Planned
from evalstream.app.commits import Committer
from evalstream.app.dead_letters import DeadLetters
from evalstream.app.inflight import InFlight
from evalstream.app.intake import SAMPLED_OUT, BatchCounts, Intake
from evalstream.app.offsets import TP, OffsetTracker, PartitionState
from evalstream.app.outputs import Outputs
from evalstream.app.pipeline import Pipeline
from evalstream.app.publish_result import ResultPublisher
from evalstream.app.session_path import SessionPath
from evalstream.errors import DecodeError, SinkError
from evalstream.events import CANARY_ATTRIBUTE, Record, TraceEvent
from evalstream.judges.waits import WAIT_SCOPE
from evalstream.logging import get_logger
from evalstream.sampling import SCALE
from evalstream.sources.base import Source

__all__ = ["MessagePath"]

log = get_logger(__name__)

_POLL_TIMEOUT_S = 0.5
# How long intake waits for a slot mid-batch before polling the (paused) consumer again.
_SLOT_POLL_S = 1.0


def _canary_header(headers: Sequence[tuple[str, bytes]]) -> bool:
    """Whether a message's Kafka headers hold ``evalstream.canary`` (any value)."""
    return any(name == CANARY_ATTRIBUTE for name, _ in headers)


class MessagePath:
    """Takes messages from the source to evaluations, results and dead letters.

    Args:
        max_poll_records: The most records one poll returns (``kafka.max_poll_records``).
        source: Polled for messages (and paused by ``slots`` while none is free).
        intake: Decodes records and counts them.
        pipeline: Plans, runs and records the evaluations of an event.
        outputs: Where results and dead letters are published.
        tracker: Which offsets are complete.
        committer: Told when work completes.
        slots: The bound on in-flight evaluations.
        fail: Called when output cannot be made durable (the worker then stops).
        sessions: The session windows (``app/session_path.py``), when a route has one.
    """

    def __init__(self, *, max_poll_records: int, source: Source, intake: Intake,
                 pipeline: Pipeline, outputs: Outputs, tracker: OffsetTracker,
                 committer: Committer, slots: InFlight,
                 fail: Callable[[BaseException], None],
                 sessions: SessionPath | None = None) -> None:
        self._max_poll_records = max_poll_records
        self.source = source
        self.intake = intake
        self.pipeline = pipeline
        self.outputs = outputs
        self.tracker = tracker
        self.committer = committer
        self.slots = slots
        self._fail = fail
        self._results = ResultPublisher(pipeline, outputs, fail)
        #: Bound once: counting a result is on the per-evaluation path.
        self._count = self._results.count
        #: Evaluations and dead letters under way (drained and cancelled together).
        self._tasks: set[asyncio.Task[None]] = set()
        self._dead_letters = DeadLetters(outputs=outputs, tracker=tracker, committer=committer,
                                         fail=fail, tasks=self._tasks)
        self._generation = 0
        self._sessions = sessions
        #: Without session windows, events are dispatched exactly as before they existed.
        self._dispatch: Callable[[Record, TP, list[TraceEvent], float | None],
                                 Awaitable[None]] = (
            self._dispatch_events if sessions is None else self._dispatch_sessions)
        # Batches a keep-alive poll returned while intake waited for a slot mid-batch (see
        # ``_keep_polled``), handled before the next poll, in the order they came.
        self._stashed: deque[Mapping[TP, Sequence[Record]]] = deque()
        #: The counts of the batch being handled, flushed early by ``_keep_polled``.
        self._counts = BatchCounts()
        #: ``sampling_key_not_trace_id`` was logged (once per process).
        self._key_not_trace_said = False

    def rebalanced(self, revoked: Sequence[TP] = ()) -> None:
        """Partitions were assigned or ``revoked``: what was taken before is not started
        now, and open session windows of revoked partitions are abandoned (redelivered)."""
        self._generation += 1
        # Not tracked yet, so nothing to abandon: the partitions' owner fetches them again
        # from the committed offsets.
        self._stashed.clear()
        if revoked and self._sessions is not None:
            self._sessions.abandon(revoked)

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the evaluations and dead letters under way; cancel
        what is still running then (uncommitted, so redelivered). Open session windows are
        abandoned first, not waited for (they would take their gap)."""
        tasks = set(self._tasks)
        if self._sessions is not None:
            self._sessions.abandon()
            tasks |= self._sessions.tasks
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        if pending:
            log.warning("drain_timeout", abandoned=len(pending), timeout_s=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def cancel(self) -> None:
        """Cancel everything under way (closing: the sink is about to go)."""
        for task in list(self._tasks):
            task.cancel()
        if self._sessions is not None:
            self._sessions.cancel()

    # --- intake -----------------------------------------------------------------------

    async def consume(self) -> None:
        """Poll and handle batches until cancelled, pausing while no slot is free (and
        close session windows as they go quiet, for as long as intake runs)."""
        if self._sessions is None:
            await self._consume()
            return
        timer = asyncio.create_task(self._sessions.run(), name="sessions")
        # Without its timer no session would ever close, and commits would stop for good.
        timer.add_done_callback(self._timer_done)
        try:
            await self._consume()
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)

    def _timer_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail(exc)

    async def _consume(self) -> None:
        max_records = self._max_poll_records
        source, slots = self.source, self.slots
        while True:
            if self._stashed:
                await self._handle_batch(self._stashed.popleft())
                continue
            if slots.full:
                await self._wait_for_capacity()
                continue
            if slots.paused:
                slots.set_paused(False)
            records = await source.poll(_POLL_TIMEOUT_S, max_records)
            if records:
                await self._handle_batch(records)

    async def _wait_for_capacity(self) -> None:
        await self.slots.wait_freed(1.0)
        # Partitions are paused, so this returns nothing new (one record read ahead before
        # the pause at most), but it keeps the consumer polling (aiokafka leaves the group
        # when it is not polled for max_poll_interval_ms).
        records = await self.source.poll(0.0, 1)
        if records:
            await self._handle_batch(records)

    async def _handle_batch(self, batch: Mapping[TP, Sequence[Record]]) -> None:
        generation = self._generation
        intake = self.intake
        intake.consumed(batch)
        counts = self._counts = BatchCounts()
        try:
            await self._handle_partitions(batch, generation, counts)
        finally:
            # Also when a stop cancels intake mid-batch: what was handled stays counted.
            intake.flush(counts)

    async def _handle_partitions(self, batch: Mapping[TP, Sequence[Record]], generation: int,
                                 counts: BatchCounts) -> None:
        intake, tracker = self.intake, self.tracker
        limit, key_hash = intake.key_limit, intake.key_hash
        to_decode = intake.to_decode
        # Where each partition's records start, for the lag of one nothing was handled on
        # yet: the source's position is past them, and the loop below may wait for slots
        # on an earlier partition for as long as a slow judge takes.
        for tp, group in batch.items():
            if group:
                tracker.fetched(tp, group[0].offset)
        # Per partition, in offset order. Messages that produce no work are not tracked one
        # by one: once a partition's records are handled, one ``advance`` covers them all.
        for tp, group in batch.items():
            if generation != self._generation:
                break  # a rebalance happened: the rest of this batch may be stale
            if not tracker.is_assigned(tp) or not group:
                continue
            # The path most messages take at low rates, one call per partition: with
            # ``sampling.key: message_key`` a CRC of the key (nothing decoded), else the
            # decoder's sampling keys (checked, hashed, nothing built). What is left is
            # decoded.
            # A keyed message with the canary header is decoded whatever its key hashes to:
            # it may be a canary, evaluated whatever the sampling (the pipeline decides from
            # its attributes). A header, not a search of the value: that cost ~1.3 us per
            # skipped 1 KB message (bench/throughput.py), a test of the headers nothing.
            work: Sequence[Record]
            if limit is not None:
                work = [r for r in group if not (k := r.key) or key_hash(k) < limit
                        or (r.headers and _canary_header(r.headers))]
                counts.sampled_out += len(group) - len(work)
            elif to_decode is not None:
                work = to_decode(tp[0], group)
                counts.sampled_out += len(group) - len(work)
                counts.decoded[tp[0]] += len(group) - len(work)
            else:
                work = group
            if await self._handle_records(work, tp, generation, counts):
                tracker.advance(tp, group[-1].offset + 1)
            else:
                break

    async def _handle_records(self, records: Sequence[Record], tp: TP, generation: int,
                              counts: BatchCounts) -> bool:
        """Decode and dispatch one partition's records; False if a rebalance cut it short."""
        intake = self.intake
        limit, key_hash = intake.key_limit, intake.key_hash
        for record in records:
            fraction = None
            if limit is not None and (key := record.key):
                fraction = key_hash(key) / SCALE  # sampled on its key, planned with it
            try:
                decoded = intake.decode(record, presampled=fraction is not None)
            except DecodeError as exc:
                await self._dead_letters.send(record, tp, exc.reason, str(exc))
                if generation != self._generation:
                    return False
                continue
            if decoded is SAMPLED_OUT:
                counts.sampled_out += 1
                counts.decoded[record.topic] += 1
                continue
            if decoded.skipped:
                counts.skipped.update(decoded.skipped)
            events = decoded.events
            if not events:
                continue
            counts.decoded[record.topic] += len(events)
            if fraction is not None and not self._key_not_trace_said:
                self._check_key(record, events[0])
            await self._dispatch(record, tp, events, fraction)
            if generation != self._generation:
                return False
        return True

    def _check_key(self, record: Record, event: TraceEvent) -> None:
        """Say once when a keyed message's key is not its event's trace id.

        ``sampling.key: message_key`` samples on the key: keyed by tenant or app, every
        message of a key shares one fraction, so a key is evaluated entirely or never (and
        intervals assuming independent draws are too narrow). Only the traffic can tell.
        Runs only for messages sampled on their key (decoded anyway): one comparison.
        """
        if record.key == event.trace_id.encode("utf-8") or (
                CANARY_ATTRIBUTE in event.attributes):  # a canary producer may key as it likes
            return
        self._key_not_trace_said = True
        log.warning("sampling_key_not_trace_id", topic=record.topic,
                    note="sampling.key: message_key samples on the Kafka message key, which "
                         "here is not the event's trace_id: every message of one key is "
                         "sampled in or out together (key producers by trace id, or use "
                         "sampling.key: trace_id; said once per process)")

    async def _dispatch_events(self, record: Record, tp: TP, events: list[TraceEvent],
                               fraction: float | None) -> None:
        """Plan the events' evaluations, track the offset, start them within the bound.

        ``fraction`` is the sampling position taken from the message key, if any.
        """
        plan = self.pipeline.plan
        if len(events) == 1:
            event = events[0]
            work = [(event, p) for p in plan(event, record.topic, fraction)]
        else:
            work = [(e, p) for e in events for p in plan(e, record.topic, fraction)]
        state = self.tracker.track(tp, record.offset, len(work))
        if state is None:
            return
        await self._start(record, state, work)

    async def _dispatch_sessions(self, record: Record, tp: TP, events: list[TraceEvent],
                                 fraction: float | None) -> None:
        """As ``_dispatch_events``, but an event with a session id is held in its session
        window on each session route it is planned on (one tracked piece each, completed
        when the session's results are durable) instead of being evaluated now."""
        plan, sessions = self.pipeline.plan, self._sessions
        assert sessions is not None
        work: list[tuple[TraceEvent, Planned]] = []
        held: list[tuple[TraceEvent, str, tuple[Planned, ...]]] = []
        for event in events:
            planned = plan(event, record.topic, fraction)
            # A canary is checked on its own: held, its gold answer would be compared with
            # the judgement of a whole conversation (and traffic with it counted as canary).
            if event.session_id and planned and planned[0].canary is None:
                now, later = sessions.split(planned)
                work.extend((event, p) for p in now)
                held.extend((event, route, tuple(ps)) for route, ps in later.items())
            else:
                work.extend((event, p) for p in planned)
        state = self.tracker.track(tp, record.offset, len(work) + len(held))
        if state is None:
            return
        if held:
            sessions.hold(record, state, held, len(events))
        await self._start(record, state, work)

    async def _start(self, record: Record, state: PartitionState,
                     work: list[tuple[TraceEvent, Planned]]) -> None:
        """Start ``work`` (tracked under ``state``), each within the in-flight bound."""
        generation = self._generation
        slots = self.slots
        for started, (event, planned) in enumerate(work):
            try:
                while not await slots.acquire(_SLOT_POLL_S):
                    await self._keep_polled()
            except asyncio.CancelledError:
                # Intake ended (a stop) while this waited for a slot: the rest never starts.
                # Abandoned, so a revoke during the drain does not wait out its deadline
                # for it; the message stays uncommitted and is redelivered.
                self.tracker.abandon(state, record.offset, len(work) - started)
                self.committer.progressed()
                raise
            if generation != self._generation:
                # Rebalanced while waiting for a slot: the partition's new owner (maybe us,
                # with fresh state) redoes this message; its remaining work is abandoned,
                # so the revoke waits only for what did start.
                slots.release()
                self.tracker.abandon(state, record.offset, len(work) - started)
                self.committer.progressed()
                return
            task = asyncio.create_task(
                self._evaluate(state, record.offset, event, planned))
            self._tasks.add(task)
            task.add_done_callback(functools.partial(self._finished, state, record.offset))

    async def _keep_polled(self) -> None:
        """Poll the consumer while intake waits for a slot in the middle of a batch.

        Slots can stay taken far longer than ``kafka.max_poll_interval_ms`` (evaluations
        waiting at a judge's spend cap with ``on_spend_cap: wait`` hold theirs until spend
        leaves the window), and aiokafka leaves the group when it is not polled. The
        partitions are paused, so this returns nothing new, except from one resumed
        meanwhile (a start position applied), or one record the source read ahead before
        the pause (``kafka.prefetch_bytes``): kept for after this batch, never dropped.
        """
        # The batch's counts so far: it may wait here as long as a slow judge takes, and
        # events_decoded must not stand still meanwhile while messages_consumed counted it.
        self.intake.flush(self._counts)
        self._counts.clear()
        records = await self.source.poll(0.0, 1)
        if records:
            self._stashed.append(records)

    # --- work ---------------------------------------------------------------------------

    def _finished(self, state: PartitionState, offset: int, task: asyncio.Task[None]) -> None:
        """An evaluation task ended, however: its slot is freed, and when it was cancelled
        (a stop, the drain's deadline, a revoke cancelling a wait at a spend cap) its piece
        is abandoned: it will never complete, so a revoke does not wait for it, and the
        partition is not committed past it (the message is redelivered).

        Here, not in ``_evaluate``: a task cancelled before its first step (at close, right
        after ``_start``) never runs its body, which would keep its slot and leave its
        piece outstanding; a done callback runs exactly once either way
        (``OffsetTracker.abandon`` counts pieces: twice would count one piece twice). It
        runs before whoever awaits the task resumes (their callbacks come later).
        """
        self._tasks.discard(task)
        self.slots.release()
        if task.cancelled():
            self.tracker.abandon(state, offset, 1)
            self.committer.progressed()

    async def _evaluate(self, state: PartitionState, offset: int, event: TraceEvent,
                        planned: Planned) -> None:
        # Each task runs in its own copy of the context, so what is bound here is seen by
        # every log line of this evaluation and needs no unbinding.
        structlog.contextvars.bind_contextvars(
            topic=state.tp[0], partition=state.tp[1], offset=offset, event_id=event.event_id)
        # So a revoke can cancel this evaluation's waits at a judge's spend cap, and refuse
        # those it starts later: the state names this assignment (a rebalance replaces it).
        WAIT_SCOPE.set(state)
        result = None
        # Its slot is freed, and when cancelled its piece abandoned, by ``_finished``.
        try:
            result = await self.pipeline.run(event, planned)
            if result is not None:
                await self.outputs.result(result)
                self._count(planned, result)
        except SinkError as exc:
            self._fail(exc)
            return
        except Exception as exc:
            # The broker refused this result for good (e.g. too large), or a bug past the
            # pipeline's own guards (e.g. a plugin's ``details`` that JSON cannot hold):
            # its error result stands in for it (``ResultPublisher.stand_in``, which says
            # why in the log), with the judge spend that result carried.
            judge = None if result is None else result.judge
            if not await self._results.stand_in(event, planned, exc, judge=judge):
                return
        self.tracker.done(state, offset)
        self.committer.progressed()
