"""The Kafka source: an aiokafka consumer group with manual commits.

Auto-commit is off: the worker commits per partition only what is complete
(``app/offsets.py``).
``poll`` reads ahead of intake up to ``kafka.prefetch_bytes`` (``sources/read_ahead.py``
says why); positions and lag count records read ahead as not yet handed out, and a revoke
drops those of the partitions that go.
Lag runs from the worker's lowest unfinished offset (else the position) to ``highwater``
(taken from fetch responses); only paused partitions, which
fetch nothing, also ask for ``end_offsets``, which the Tansu broker answers with the last
batch's base offset + 1 (short of the end), so the larger of the two counts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    ConsumerStoppedError,
    GroupAuthorizationFailedError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from evalstream.config import KafkaSettings
from evalstream.config.kafka import REFUSED_OPTION, build_client, refused_option
from evalstream.errors import SourceError
from evalstream.events import Record
from evalstream.logging import get_logger
from evalstream.sources.base import TP, RebalanceHandler, Unfinished
from evalstream.sources.kafka_start import start_positions
from evalstream.sources.read_ahead import ReadAhead

__all__ = ["KafkaSource"]

log = get_logger(__name__)

_BACKOFF_S = 0.5
#: How far past its own timeout ``poll`` lets aiokafka's getmany run (see ``poll``).
_POLL_GRACE_S = 0.1
#: How long ``lag`` waits for the end offsets of paused partitions.
_END_OFFSETS_TIMEOUT_S = 2.0
#: How long the start offsets of ``kafka.start_from`` may take (retrying transient errors):
#: the rebalance waits for them, so not ``connect_timeout_s``.
_START_LOOKUP_TIMEOUT_S = 30.0
#: Consumer errors that waiting cannot fix: the worker stops (exit 1) naming them.
_PERMANENT = (TopicAuthorizationFailedError, GroupAuthorizationFailedError,
              ClusterAuthorizationFailedError, InvalidSessionTimeoutError,
              InconsistentGroupProtocolError, AuthenticationFailedError)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, handler: RebalanceHandler,
                 position: Callable[[Sequence[TopicPartition]], Awaitable[None]],
                 answered: Callable[[], None] = lambda: None,
                 forget: Callable[[Sequence[TopicPartition]], None] = lambda tps: None) -> None:
        self._handler = handler
        self._position = position
        self._answered = answered
        self._forget = forget

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        # First, with no await before it: a poll resuming meanwhile must not hand out
        # records read ahead from partitions that are going.
        self._forget(revoked)
        if revoked:
            await self._handler.on_revoked([(tp.topic, tp.partition) for tp in revoked])

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        # A rebalance completed: the group coordinator answered (even with nothing for us).
        self._answered()
        # Positions first: aiokafka calls this before it fetches from ``assigned``.
        await self._position(assigned)
        await self._handler.on_assigned([(tp.topic, tp.partition) for tp in assigned])


def _end_fetch(consumer: AIOKafkaConsumer) -> None:
    """Close the fetch a ``getmany`` that did not return left open (aiokafka 0.14).

    getmany counts itself in ``SubscriptionState.fetch_context``, which has no ``finally``:
    cancelled (``poll``'s timeout) or raising (a partition's fetch error), it stayed
    counted for good, ``fetcher_idle_time`` read 0 from then on, and aiokafka never left
    the group for want of polls (``max_poll_interval_ms``) however long intake was stuck.
    ``poll`` is the consumer's only reader, one call at a time, so a count left above 0 is
    that call's (an error raised before the context, or an aiokafka that closes it itself,
    leaves 0 here).
    """
    subscription = consumer._subscription
    if subscription._fetch_count > 0:
        subscription._fetch_count -= 1
        if subscription._fetch_count == 0:
            subscription._last_fetch_ended = time.monotonic()


def _polled(consumer: AIOKafkaConsumer) -> None:
    """Count a poll that fetched nothing for aiokafka's ``max_poll_interval_ms`` (aiokafka
    0.14): what ``getmany`` does besides fetching (its fetch context's end time is what
    ``fetcher_idle_time`` reads)."""
    with consumer._subscription.fetch_context():
        pass


def _coordination_ended(consumer: AIOKafkaConsumer) -> bool:
    """Whether aiokafka's group coordination task ended while the consumer runs (aiokafka
    0.14).

    An unexpected error in it (a client bug) ends it for good: aiokafka hands the error to
    the waiting ``getmany`` once as a plain KafkaError, and each later fetch raises the same
    (the subscription is never rejoined). Only a restart cures it; the source's ``stop``
    ends the task too, but then ``getmany`` raises ``ConsumerStoppedError`` instead.
    """
    task = getattr(getattr(consumer, "_coordinator", None), "_coordination_task", None)
    if not (isinstance(task, asyncio.Future) and task.done()):
        return False
    if not task.cancelled():
        # Retrieved: the worker reports it. Left alone, asyncio logs it once more when the
        # task is collected, wherever that happens to be.
        task.exception()
    return True


class KafkaSource:
    """Consumes ``topics`` in consumer group ``settings.group_id``.

    Args:
        settings: Connection, group and fetch settings.
        topics: The input topics.
    """

    def __init__(self, settings: KafkaSettings, topics: Sequence[str]) -> None:
        self._settings = settings
        self._topics = list(topics)
        self._consumer: AIOKafkaConsumer | None = None
        self._connected = False
        self._reachable = True
        #: Why the partitions could not be positioned (``start_from``); ``poll`` raises it.
        self._failure: SourceError | None = None
        #: Partitions ``_position`` keeps paused until they are seeked: ``resume`` (intake
        #: finding a slot free during the lookup) must not let them fetch from
        #: ``auto_offset_reset``'s position meanwhile.
        self._positioning: set[TopicPartition] = set()
        #: Batches fetched ahead of intake (``kafka.prefetch_bytes``; None when it is 0).
        self._ahead = ReadAhead(settings.prefetch_bytes) if settings.prefetch_bytes else None

    @property
    def connected(self) -> bool:
        """Whether the consumer started, has not been stopped, and its last ``check``
        reached the broker."""
        return self._connected and self._reachable

    async def check(self, timeout_s: float) -> None:
        """Ask the leader of an assigned partition for its end offset, to see it answers.

        aiokafka reconnects by itself and keeps the assignment while the broker is gone,
        so nothing else tells a worker that has lost its broker from an idle one. One small
        request (not a metadata request: that lists every topic of the cluster); only that
        an answer comes matters, not its value (see the module note on ``end_offsets``).
        """
        consumer = self._consumer
        if consumer is None:
            return
        assigned = sorted(consumer.assignment())
        if not assigned:
            # Not ready anyway; nothing to ask about. A rebalance that left us nothing
            # marks the broker as answering (``_group_answered``).
            return
        reachable = await _end_offsets(consumer, assigned[:1], timeout_s) is not None
        if reachable != self._reachable:
            if reachable:
                log.info("broker_reachable")
            else:
                log.warning("broker_unreachable_while_running", timeout_s=timeout_s)
        self._reachable = reachable

    def _options(self) -> dict[str, Any]:
        s = self._settings
        options: dict[str, Any] = {
            "group_id": s.group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": s.auto_offset_reset,
            "session_timeout_ms": s.session_timeout_ms,
            "max_poll_interval_ms": s.max_poll_interval_ms,
            "heartbeat_interval_ms": max(100, s.session_timeout_ms // 10),
            "max_poll_records": s.max_poll_records,
            "fetch_max_bytes": s.fetch_max_bytes,
            "max_partition_fetch_bytes": s.max_partition_fetch_bytes,
        }
        options.update(s.client_options("consumer"))
        return options

    def client(self) -> AIOKafkaConsumer:
        """The consumer, built but not started (call from a running event loop).

        Raises:
            ConfigError: aiokafka refuses an option.
        """
        return build_client(AIOKafkaConsumer, self._options(), "consumer")

    async def start(self, handler: RebalanceHandler) -> None:
        """Connect, join the group and subscribe.

        Raises:
            SourceError: the broker cannot be reached.
            ConfigError: aiokafka refuses an option.
        """
        consumer = self.client()
        try:
            await self._connect(consumer)
        except BaseException:  # failed, or start-up's deadline cancelled it: close it
            await consumer.stop()
            raise
        consumer.subscribe(self._topics, listener=self._listener(handler))
        self._consumer = consumer
        self._connected = self._reachable = True

    def _listener(self, handler: RebalanceHandler) -> _Listener:
        """The rebalance listener the consumer calls (its own method for tests)."""
        return _Listener(handler, self._position, self._group_answered, self._forget)

    def _forget(self, tps: Sequence[TopicPartition]) -> None:
        """Drop what was read ahead from ``tps`` (revoked: fetched again by their owner)."""
        if self._ahead is not None:
            self._ahead.drop(set(tps))

    def _group_answered(self) -> None:
        """The group's coordinator answered (a rebalance completed): the broker is there.

        ``check`` asks about an assigned partition only, so a member left with none after
        an outage would otherwise keep its last answer, "unreachable", for good: /readyz
        then sends on-call after a broker that answers, rather than saying the member has
        no partitions.
        """
        if not self._reachable:
            log.info("broker_reachable")
            self._reachable = True

    async def _connect(self, consumer: AIOKafkaConsumer) -> None:
        try:
            await consumer.start()
        except KafkaError as exc:
            raise SourceError(f"cannot connect to Kafka at {self._settings.bootstrap_servers}: "
                              f"{exc}") from exc
        except REFUSED_OPTION as exc:
            # Some options are checked only once connected (isolation_level builds the
            # fetcher): a config error (exit 2), not a traceback.
            raise refused_option("consumer", exc) from exc

    async def _position(self, assigned: Sequence[TopicPartition]) -> None:
        """Seek the assigned partitions that have no committed offset to ``start_from``.

        On failure the partitions stay paused and ``poll`` raises: falling back to
        ``auto_offset_reset`` would re-score the whole topic (earliest) or skip the window
        (latest), and the offsets it commits would make ``start_from`` ignored from then on.
        """
        start_from, consumer = self._settings.start_from, self._consumer
        if start_from is None or consumer is None or not assigned:
            return
        tps = sorted(assigned)
        # Paused before the first await: aiokafka's fetcher runs meanwhile and would hand
        # out records from auto_offset_reset's position. Kept out of ``resume`` until seeked
        # (for good when the lookup fails).
        self._positioning.update(tps)
        consumer.pause(*tps)
        try:
            starts = await start_positions(consumer, tps, start_from, _START_LOOKUP_TIMEOUT_S)
        except Exception as exc:
            # Anything, not only SourceError: aiokafka logs and swallows what a rebalance
            # listener raises, which would leave these partitions paused and the worker
            # silently idle. ``poll`` raises it instead, and the worker stops (exit 1).
            failure = exc if isinstance(exc, SourceError) else SourceError(
                f"kafka.start_from: the offset lookup failed: {type(exc).__name__}: {exc}")
            log.error("start_from_lookup_failed", error=str(failure))
            self._failure = failure
            return
        for tp, start in sorted(starts.items()):
            consumer.seek(tp, start.offset)
            log.info("partition_start_from", partition=f"{tp.topic}:{tp.partition}",
                     offset=start.offset, chosen_by=start.how,
                     start_from=start_from.isoformat())
        self._positioning.difference_update(tps)
        consumer.resume(*tps)

    async def poll(self, timeout_s: float, max_records: int) -> Mapping[TP, Sequence[Record]]:
        """The next records by partition; empty on timeout or after a transient error.

        Raises:
            SourceError: a permanent consumer error, or ``start_from`` could not be applied.
        """
        if self._failure is not None:
            raise self._failure
        consumer = self._consumer
        if consumer is None:
            return {}
        ahead = self._ahead
        if ahead is None:
            return await self._getmany(consumer, timeout_s, max_records)
        if ahead:
            # Intake may run on read-ahead batches for long without waiting: one pass of
            # the event loop per batch lets the next response be read from the socket (and
            # the evaluations started from the last batch run).
            await asyncio.sleep(0)
            if ahead.full:
                # Nothing more is fetched, but intake polled: under backpressure it takes
                # one record a second here, and without a getmany aiokafka would leave the
                # group after max_poll_interval_ms while intake was working through this.
                _polled(consumer)
        else:
            batch = await self._getmany(consumer, timeout_s, max_records)
            if not batch:
                return {}
            ahead.push(batch)
        # Before taking: reading ahead may wait out a rebalance, which drops the revoked
        # partitions' records, so what is handed out is always the current assignment's.
        # Whole batches, whatever this poll asked for: the keep-alive poll under
        # backpressure asks for one record, and one-record batches read ahead would be
        # handed out one per poll long after the pause.
        read = self._settings.max_poll_records
        while not ahead.full:
            more = await self._getmany(consumer, 0.0, read)
            if not more:
                break
            ahead.push(more)
        return ahead.take(max_records)

    async def _getmany(self, consumer: AIOKafkaConsumer, timeout_s: float,
                       max_records: int) -> Mapping[TP, Sequence[Record]]:
        """One ``getmany``: records, or empty on timeout or after a transient error.

        Raises:
            SourceError: a permanent consumer error.
        """
        try:
            # Bounded here too: during a rebalance getmany waits for the new assignment
            # whatever its timeout, and the assignment waits for our revoke, which waits
            # for the message intake is starting, while intake sat in its keep-alive poll
            # (``MessagePath._keep_polled``): every such revoke took its whole deadline.
            # A cancelled getmany has handed out nothing (positions move as it returns).
            async with asyncio.timeout(timeout_s + _POLL_GRACE_S):
                batch = await consumer.getmany(timeout_ms=int(timeout_s * 1000),
                                               max_records=max_records)
        except TimeoutError:
            _end_fetch(consumer)
            return {}
        except ConsumerStoppedError:
            return {}
        except _PERMANENT as exc:
            # aiokafka retries what can heal itself; these reach us and never will (access
            # revoked, a session timeout the broker refuses): stop with the reason rather
            # than log a warning twice a second for ever while /readyz says ready.
            raise SourceError(f"consuming from Kafka failed: {type(exc).__name__}: {exc}") \
                from exc
        except KafkaError as exc:
            if _coordination_ended(consumer):
                # aiokafka's group coordination task died of an unexpected error: no
                # heartbeat or rejoin from now on, and every fetch raises this again.
                raise SourceError(f"consuming from Kafka failed: the consumer group "
                                  f"coordination ended: {exc}") from exc
            # Transient (leader moved, broker restarting), or a single record aiokafka
            # skipped (RecordTooLargeError): back off and keep going.
            _end_fetch(consumer)
            log.warning("fetch_failed", error=str(exc))
            await asyncio.sleep(_BACKOFF_S)
            return {}
        # As aiokafka returns them: its TopicPartition is a (topic, partition) named tuple
        # and its records satisfy ``Record``, so nothing is copied per message.
        return batch  # type: ignore[no-any-return]  # aiokafka is untyped

    def assignment(self) -> set[TP]:
        """The partitions currently assigned to this member."""
        if self._consumer is None:
            return set()
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def pause(self) -> None:
        """Pause fetching from every assigned partition."""
        if self._consumer is not None:
            self._consumer.pause(*self._consumer.assignment())

    def resume(self) -> None:
        """Resume fetching from every assigned partition not waiting for its start offset."""
        if self._consumer is not None:
            self._consumer.resume(*(self._consumer.assignment() - self._positioning))

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit the given next-offsets."""
        if self._consumer is None or not offsets:
            return
        try:
            await self._consumer.commit(
                {TopicPartition(t, p): offset for (t, p), offset in offsets.items()})
        except KafkaError as exc:
            raise SourceError(f"offset commit failed: {exc}") from exc

    async def lag(self, unfinished: Unfinished | None = None) -> dict[TP, int]:
        """Messages not yet done per assigned partition whose end offset is known.

        Args:
            unfinished: The lowest offset of a partition whose work is not complete (None
                where nothing was taken yet): under backpressure up to ``max_poll_records``
                fetched messages wait for a slot past the position, and every evaluation in
                flight or held is behind it too. Without it (or where it gives None), the
                end offset minus the consumer's position.
        """
        consumer = self._consumer
        if consumer is None:
            return {}
        # A paused partition is not fetched, so its highwater (read from fetch responses)
        # stands still: with every evaluation slot taken - a slow judge, when lag matters -
        # the gauge would read 0 while the backlog grows. Ask the broker for those; Tansu's
        # end offset can fall short (module note), so the larger of the two is kept.
        paused = sorted(consumer.paused() & consumer.assignment())
        ends: dict[TopicPartition, int] = {}
        if paused:
            ends = await _end_offsets(consumer, paused, _END_OFFSETS_TIMEOUT_S) or {}
        out: dict[TP, int] = {}
        for tp in list(consumer.assignment()):
            # position() awaits, and a rebalance meanwhile can take the next partition
            # away: highwater() asserts on a partition that is no longer assigned.
            if tp not in consumer.assignment():
                continue
            known = [h for h in (consumer.highwater(tp), ends.get(tp)) if h is not None]
            if not known:
                continue
            high = max(known)
            key = (tp.topic, tp.partition)
            start = unfinished(key) if unfinished is not None else None
            if start is None:
                start = self._ahead_of(tp)
            if start is None:
                try:
                    start = await consumer.position(tp)
                except KafkaError:  # IllegalStateError included: revoked during the await
                    continue
            out[key] = max(0, high - start)
        return out

    async def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The brokers' end offsets of ``tps``; empty when none came in time.

        Tansu answers short of a last batch of several records (module note): a job that
        waits for this offset still evaluates that whole batch, fetched at once.
        """
        consumer = self._consumer
        if consumer is None or not tps:
            return {}
        ends = await _end_offsets(consumer, [TopicPartition(t, p) for t, p in tps],
                                  _END_OFFSETS_TIMEOUT_S)
        return {(tp.topic, tp.partition): int(end) for tp, end in (ends or {}).items()}

    async def positions(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The next offsets ``poll`` hands out (the first read ahead, else the consumer's
        position); those not known within a few seconds are left out."""
        consumer = self._consumer
        if consumer is None:
            return {}
        assigned = consumer.assignment()
        wanted = [tp for tp in (TopicPartition(t, p) for t, p in tps) if tp in assigned]

        async def position(tp: TopicPartition) -> int | None:
            try:  # waits for the committed or reset position of a fresh partition
                async with asyncio.timeout(_END_OFFSETS_TIMEOUT_S * 2):
                    return int(await consumer.position(tp))
            except (KafkaError, TimeoutError):
                return None

        # All at once: this runs in the rebalance listener, and one by one N partitions
        # could hold the rebalance for N timeouts.
        found = await asyncio.gather(*(position(tp) for tp in wanted))
        # Records read ahead are not handed out yet: the next offset intake gets is theirs.
        return {(tp.topic, tp.partition): offset if (ahead := self._ahead_of(tp)) is None
                else ahead
                for tp, offset in zip(wanted, found, strict=True) if offset is not None}

    def _ahead_of(self, tp: TopicPartition) -> int | None:
        """The first offset of ``tp`` read ahead and not handed out yet, if any."""
        return None if self._ahead is None else self._ahead.first_offset(
            (tp.topic, tp.partition))

    async def stop(self) -> None:
        """Leave the group and close the connection. aiokafka runs no revoke callback
        here: the worker's final commit (``app/shutdown.final_commit``) commits the last work."""
        consumer, self._consumer = self._consumer, None
        self._connected = False
        if self._ahead is not None:
            self._ahead.clear()
        if consumer is not None:
            await consumer.stop()


async def _end_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                       timeout_s: float) -> dict[TopicPartition, int] | None:
    """The brokers' end offsets of ``tps``, or None when no answer came within ``timeout_s``
    (aiokafka may otherwise wait indefinitely, e.g. for a partition that is gone)."""
    try:
        async with asyncio.timeout(timeout_s):
            ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
    except (KafkaError, TimeoutError):
        return None
    return ends
