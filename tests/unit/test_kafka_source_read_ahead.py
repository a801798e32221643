"""KafkaSource.poll reads ahead (``kafka.prefetch_bytes``): what it hands out, and when.

A scripted consumer stands in for aiokafka here: ``getmany`` hands out what aiokafka holds
buffered without waiting. The real broker's side is in
``tests/integration/test_kafka_source_read_ahead.py``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from aiokafka import TopicPartition
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.structs import ConsumerRecord

from evalstream.config import KafkaSettings
from evalstream.sources.kafka import KafkaSource

P0, P1 = TopicPartition("traces", 0), TopicPartition("traces", 1)


def batch(tp: TopicPartition, start: int, n: int, size: int = 100) -> dict[TopicPartition,
                                                                          list[ConsumerRecord]]:
    return {tp: [ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, None, b"x" * size, None,
                                -1, size, ()) for offset in range(start, start + n)]}


class _Buffered:
    """aiokafka with ``batches`` buffered: each getmany hands out the next, at once."""

    def __init__(self, *batches: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self.batches = deque(batches)
        self.calls = 0
        self.asked: list[int] = []
        self.assigned = {P0, P1}
        self.positions = {P0: 0, P1: 0}
        self._subscription = SubscriptionState()

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Any:
        self.calls += 1
        self.asked.append(max_records)
        with self._subscription.fetch_context():  # as aiokafka: what max_poll_interval_ms reads
            return await self._fetched(timeout_ms)

    async def _fetched(self, timeout_ms: int) -> Any:
        if not self.batches:
            if timeout_ms:
                await asyncio.sleep(timeout_ms / 1000)
            return {}
        out = self.batches.popleft()
        for tp, records in out.items():  # as aiokafka: positions move as records go out
            self.positions[tp] = records[-1].offset + 1
        return out

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set()

    def highwater(self, tp: TopicPartition) -> int:
        return 100

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]


def source(consumer: _Buffered, prefetch_bytes: int = 16_777_216) -> KafkaSource:
    src = KafkaSource(KafkaSettings(prefetch_bytes=prefetch_bytes), ["traces"])
    src._consumer = consumer  # type: ignore[assignment]
    return src


def offsets(got: Any) -> dict[int, list[int]]:
    return {tp[1]: [r.offset for r in rs] for tp, rs in got.items()}


async def test_the_first_poll_takes_everything_buffered_and_hands_it_out_in_order() -> None:
    consumer = _Buffered(batch(P0, 0, 3), batch(P1, 0, 2), batch(P0, 3, 2))
    src = source(consumer)
    assert offsets(await src.poll(0.1, 500)) == {0: [0, 1, 2]}
    # Everything buffered was taken in that poll (so aiokafka can send its next fetch),
    # plus one getmany that found nothing more.
    assert consumer.calls == 4
    assert not consumer.batches
    assert offsets(await src.poll(0.1, 500)) == {1: [0, 1]}
    assert offsets(await src.poll(0.1, 500)) == {0: [3, 4]}
    assert consumer.calls == 6  # one look for more after each
    assert await src.poll(0.05, 500) == {}


async def test_reading_ahead_stops_at_prefetch_bytes() -> None:
    consumer = _Buffered(*(batch(P0, i * 10, 10) for i in range(10)))  # 1,000 B each
    src = source(consumer, prefetch_bytes=2_500)
    await src.poll(0.1, 500)
    # Three taken (3,000 B >= 2,500, the one handed out included), seven left in aiokafka.
    assert len(consumer.batches) == 7


async def test_without_prefetch_each_poll_is_one_getmany() -> None:
    consumer = _Buffered(batch(P0, 0, 3), batch(P1, 0, 2))
    src = source(consumer, prefetch_bytes=0)
    assert offsets(await src.poll(0.1, 500)) == {0: [0, 1, 2]}
    assert consumer.calls == 1
    assert len(consumer.batches) == 1


async def test_a_poll_from_what_was_read_ahead_lets_other_tasks_run() -> None:
    # Intake never waits while batches are held: without a pass of the event loop per poll
    # the next fetch response would sit unread (and started evaluations would not run)
    # until all of them were handled, which is the idle time reading ahead is for.
    consumer = _Buffered(*(batch(P0, i * 10, 10) for i in range(5)))
    src = source(consumer)
    await src.poll(0.1, 500)
    ran = 0

    async def other() -> None:
        nonlocal ran
        while True:
            ran += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    try:
        for _ in range(4):
            await src.poll(0.1, 500)
        assert ran >= 4
    finally:
        task.cancel()


async def test_a_revoke_drops_what_was_read_ahead_from_the_revoked_partitions() -> None:
    consumer = _Buffered(batch(P0, 0, 2), batch(P1, 0, 2), batch(P0, 2, 2), batch(P1, 2, 2))
    src = source(consumer)
    assert offsets(await src.poll(0.1, 500)) == {0: [0, 1]}

    class Handler:
        async def on_assigned(self, tps: Any) -> None:
            pass

        async def on_revoked(self, tps: Any) -> None:
            pass

    # P1 goes to another member, which fetches it again from the committed offset.
    consumer.assigned = {P0}
    await src._listener(Handler()).on_partitions_revoked([P1])
    assert offsets(await src.poll(0.1, 500)) == {0: [2, 3]}
    assert await src.poll(0.05, 500) == {}


async def test_positions_and_lag_count_from_the_first_record_not_handed_out() -> None:
    # ``run --until-caught-up`` compares positions with end offsets; the lag gauge counts
    # from the position where the worker has taken nothing yet. Records read ahead are
    # past aiokafka's position but not handed out: counted as not done.
    consumer = _Buffered(batch(P0, 0, 10), batch(P0, 10, 10), batch(P1, 0, 5))
    src = source(consumer)
    await src.poll(0.1, 500)
    assert consumer.positions == {P0: 20, P1: 5}
    assert await src.positions([("traces", 0), ("traces", 1)]) == {("traces", 0): 10,
                                                                  ("traces", 1): 0}
    assert await src.lag() == {("traces", 0): 90, ("traces", 1): 100}
    assert await src.lag(lambda tp: 3 if tp == ("traces", 0) else None) == {
        ("traces", 0): 97, ("traces", 1): 100}


async def test_a_poll_counts_as_one_for_aiokafka_while_the_read_ahead_is_full() -> None:
    # Under backpressure intake takes one record per keep-alive poll, about once a second
    # (``MessagePath._keep_polled``), and a full read-ahead fetched nothing more: no
    # getmany for as many polls as the last batch pushed it over the limit by records (up
    # to max_poll_records), so with max_poll_interval_ms below that aiokafka left the
    # group while intake was polling.
    consumer = _Buffered(batch(P0, 0, 20))  # 2,000 B: the read-ahead is full at once
    src = source(consumer, prefetch_bytes=1_000)
    assert offsets(await src.poll(0.1, 1)) == {0: [0]}
    for offset in range(1, 6):
        await asyncio.sleep(0.05)
        assert offsets(await src.poll(0.0, 1)) == {0: [offset]}
        assert consumer._subscription.fetcher_idle_time < 0.02


async def test_a_one_record_poll_reads_ahead_whole_batches() -> None:
    # The keep-alive poll under backpressure asks for one record: reading ahead one record
    # per getmany would leave intake with one-record batches for long after the pause.
    consumer = _Buffered(batch(P0, 0, 3), batch(P1, 0, 2))
    src = source(consumer)
    assert offsets(await src.poll(0.0, 1)) == {0: [0]}
    assert consumer.asked[0] == 1
    assert set(consumer.asked[1:]) == {KafkaSettings().max_poll_records}
