"""KafkaSource.poll: transient consumer errors are waited out, permanent ones stop the worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidSessionTimeoutError,
    NodeNotReadyError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)

from evalstream.config import KafkaSettings
from evalstream.errors import SourceError
from evalstream.sources import kafka as source_module
from evalstream.sources.kafka import KafkaSource


class _Raising:
    """Stands in for the aiokafka consumer: getmany raises what it is given."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self._subscription = SubscriptionState()  # what poll reads after a failed fetch

    async def getmany(self, **_: Any) -> Any:
        raise self.exc


def _source(exc: Exception) -> KafkaSource:
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = _Raising(exc)  # type: ignore[assignment]
    return source


@pytest.mark.parametrize("exc", [TopicAuthorizationFailedError(),
                                 GroupAuthorizationFailedError(),
                                 InvalidSessionTimeoutError()])
async def test_permanent_consumer_errors_stop_with_the_reason(exc: Exception) -> None:
    # aiokafka retries what can heal; these never will, so logging them for ever (while
    # /readyz says ready) helps no one.
    with pytest.raises(SourceError, match=type(exc).__name__):
        await _source(exc).poll(0.1, 10)


@pytest.mark.parametrize("exc", [NodeNotReadyError(), RecordTooLargeError()])
async def test_transient_consumer_errors_are_waited_out(
        exc: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_module, "_BACKOFF_S", 0.0)
    assert await _source(exc).poll(0.1, 10) == {}


class _Rebalancing:
    """A consumer whose second partition is taken away while position() awaits."""

    def __init__(self) -> None:
        self.assigned = {TopicPartition("traces", 0), TopicPartition("traces", 1)}

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set()

    def highwater(self, tp: TopicPartition) -> int:
        assert tp in self.assigned  # as aiokafka does
        return 100

    async def position(self, tp: TopicPartition) -> int:
        self.assigned.discard(TopicPartition("traces", 1 - tp.partition))
        return 40


async def test_lag_skips_a_partition_revoked_while_it_was_being_read() -> None:
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = _Rebalancing()  # type: ignore[assignment]
    lag = await source.lag()
    assert len(lag) == 1
    assert list(lag.values()) == [60]


class _Steady(_Rebalancing):
    """Both partitions stay assigned; position() is 40 on each, and counted."""

    def __init__(self) -> None:
        super().__init__()
        self.position_calls = 0

    async def position(self, tp: TopicPartition) -> int:
        self.position_calls += 1
        return 40


async def test_lag_counts_from_the_lowest_unfinished_offset_where_the_worker_knows_it() -> None:
    # Partition 0: work from offset 25 on is not done (fetched past the position, waiting
    # for a slot or in flight); partition 1: nothing taken yet, so from the position.
    source = KafkaSource(KafkaSettings(), ["traces"])
    consumer = _Steady()
    source._consumer = consumer  # type: ignore[assignment]
    lag = await source.lag(lambda tp: 25 if tp == ("traces", 0) else None)
    assert lag == {("traces", 0): 75, ("traces", 1): 60}
    assert consumer.position_calls == 1  # only where the worker knows nothing


class _Coordinator:
    def check_errors(self) -> None:
        pass


class _AssignmentPending:
    """aiokafka's fetcher while a rebalance is in progress: waits for the new assignment
    whatever the timeout (here, for good)."""

    async def fetched_records(self, *_: Any, **__: Any) -> Any:
        await asyncio.Event().wait()


def unstarted_source(fetcher: Any) -> tuple[AIOKafkaConsumer, KafkaSource]:
    """A source over a real, never started aiokafka consumer whose fetcher is ``fetcher``:
    its ``getmany`` (and fetch accounting) run for real up to the fetcher."""
    consumer = AIOKafkaConsumer("traces", bootstrap_servers="localhost:1")
    consumer._coordinator = _Coordinator()
    consumer._fetcher = fetcher
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = consumer
    return consumer, source


async def test_a_poll_cut_short_during_a_rebalance_leaves_aiokafka_s_poll_liveness_working(
) -> None:
    # aiokafka's getmany counts itself in a fetch context that has no ``finally``: one
    # cancelled by poll's own timeout stayed counted for good, so ``fetcher_idle_time``
    # read 0 from then on and aiokafka never left the group (max_poll_interval_ms) however
    # long intake stopped polling: a stuck replica kept its partitions.
    consumer, source = unstarted_source(_AssignmentPending())
    try:
        assert await source.poll(0.0, 1) == {}  # returned within its timeout
        await asyncio.sleep(0.05)
        assert consumer._subscription.fetcher_idle_time >= 0.05
    finally:
        consumer._closed = True  # never started: nothing to close


class _FetchFails:
    """aiokafka's fetcher handing out a partition's fetch error (transient)."""

    async def fetched_records(self, *_: Any, **__: Any) -> Any:
        raise NodeNotReadyError()


async def test_a_fetch_error_leaves_aiokafka_s_poll_liveness_working(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The same fetch context, left by an error: waited out and polled again, the worker
    # never counted as idle again either.
    monkeypatch.setattr(source_module, "_BACKOFF_S", 0.0)
    consumer, source = unstarted_source(_FetchFails())
    try:
        assert await source.poll(0.0, 1) == {}
        await asyncio.sleep(0.05)
        assert consumer._subscription.fetcher_idle_time >= 0.05
    finally:
        consumer._closed = True  # never started: nothing to close


class _Assigned:
    """Stands in for the aiokafka consumer: what it holds is set by the test."""

    def __init__(self) -> None:
        self.held: set[TopicPartition] = {TopicPartition("traces", 0)}

    def assignment(self) -> set[TopicPartition]:
        return set(self.held)


class _Handler:
    async def on_assigned(self, tps: Any) -> None:
        pass

    async def on_revoked(self, tps: Any) -> None:
        pass


async def test_a_replica_left_without_partitions_after_an_outage_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An outage while it held a partition marked the broker unreachable; the group then
    # gave that partition to another replica. The check asks only about assigned
    # partitions, so /readyz said "the broker did not answer the last check" for good,
    # sending on-call after a broker that answers, and the no-partitions warning never came.
    from evalstream.app.health import NO_PARTITIONS, not_ready_reason

    source = KafkaSource(KafkaSettings(), ["traces"])
    consumer = _Assigned()
    source._consumer = consumer  # type: ignore[assignment]
    source._connected = True

    async def no_answer(*_: Any) -> None:
        return None

    monkeypatch.setattr(source_module, "_end_offsets", no_answer)
    await source.check(0.1)
    assert not_ready_reason(stopping=False, started=True, source=source) == \
        "the broker did not answer the last check"
    # The broker is back; the rebalance that follows gives this member nothing: the group
    # coordinator answered, so the broker did.
    consumer.held = set()
    listener = source._listener(_Handler())
    await listener.on_partitions_revoked([TopicPartition("traces", 0)])
    await listener.on_partitions_assigned(set())
    await source.check(0.1)
    assert not_ready_reason(stopping=False, started=True, source=source) == NO_PARTITIONS
