"""kafka.start_from: how start offsets are chosen from the broker's answers, and what a
failed lookup does (the broker itself is exercised in tests/integration/test_worker_backfill.py).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import OffsetAndTimestamp

from evalstream.config import KafkaSettings
from evalstream.errors import SourceError
from evalstream.sources import kafka as source_module
from evalstream.sources import kafka_start
from evalstream.sources.kafka import KafkaSource
from evalstream.sources.kafka_start import Start, epoch_ms, start_positions

WHEN = datetime(2026, 11, 29, tzinfo=UTC)
AT = epoch_ms(WHEN)
P0, P1, P2, P3 = (TopicPartition("traces", p) for p in range(4))


class _Consumer:
    """Answers as a broker would; ``fail`` makes every lookup raise."""

    def __init__(self, committed: dict[TopicPartition, int | None],
                 found: dict[TopicPartition, OffsetAndTimestamp | None],
                 fail: Exception | None = None) -> None:
        self._committed = committed
        self._found = found
        self.fail = fail
        self.asked: list[TopicPartition] = []
        self.paused: set[TopicPartition] = set()
        self.seeks: dict[TopicPartition, int] = {}
        #: Set to make ``offsets_for_times`` wait until it is set.
        self.answer: asyncio.Event | None = None

    def assignment(self) -> set[TopicPartition]:
        return {P0, P1, P2, P3}

    async def committed(self, tp: TopicPartition) -> int | None:
        return self._committed.get(tp)

    async def offsets_for_times(self, query: dict[TopicPartition, int]) -> Any:
        if self.fail is not None:
            raise self.fail
        if self.answer is not None:
            await self.answer.wait()
        assert set(query.values()) == {AT}
        self.asked.extend(query)
        return {tp: self._found.get(tp) for tp in query}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 100 + tp.partition for tp in tps}

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks[tp] = offset


async def test_fresh_partitions_start_at_the_time_or_at_their_end() -> None:
    consumer = _Consumer(
        committed={P3: 7},
        found={P0: OffsetAndTimestamp(5, AT + 10),
               P1: None,  # Kafka: no record at or after the time
               P2: OffsetAndTimestamp(0, -1),  # Tansu's answer for the same
               P3: OffsetAndTimestamp(0, AT)})
    starts = await start_positions(consumer, [P0, P1, P2, P3], WHEN, 5.0)
    assert starts == {P0: Start(5, "timestamp"), P1: Start(101, "end_no_record"),
                      P2: Start(102, "end_earlier_record")}
    assert P3 not in consumer.asked  # committed: kept, not even looked up


async def test_a_lookup_that_keeps_failing_raises_within_the_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_start, "_BACKOFF_S", 0.01)
    consumer = _Consumer({}, {}, fail=KafkaTimeoutError())
    with pytest.raises(SourceError, match=r"kafka\.start_from: cannot look up the offsets"):
        await start_positions(consumer, [P0], WHEN, 0.1)


async def test_a_failed_lookup_keeps_the_partitions_paused_and_stops_the_worker(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Falling back to auto_offset_reset would re-score the topic or skip the window, and
    # its commits would make start_from ignored from then on: stop (exit 1) instead.
    monkeypatch.setattr(source_module, "_START_LOOKUP_TIMEOUT_S", 0.05)
    consumer = _Consumer({}, {}, fail=KafkaTimeoutError())
    source = KafkaSource(KafkaSettings(start_from=WHEN), ["traces"])
    source._consumer = consumer  # type: ignore[assignment]
    await source._position([P0, P1])
    assert consumer.paused == {P0, P1}
    assert not consumer.seeks
    with pytest.raises(SourceError, match=r"kafka\.start_from"):
        await source.poll(0.1, 10)


async def test_an_unexpected_lookup_error_stops_the_worker_instead_of_idling(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # aiokafka swallows what a rebalance listener raises: unhandled, the partitions would
    # stay paused and the worker idle with no error.
    consumer = _Consumer({}, {}, fail=ValueError("odd answer"))
    source = KafkaSource(KafkaSettings(start_from=WHEN), ["traces"])
    source._consumer = consumer  # type: ignore[assignment]
    await source._position([P0])
    assert consumer.paused == {P0}
    with pytest.raises(SourceError, match=r"kafka\.start_from: the offset lookup failed: "
                                          r"ValueError"):
        await source.poll(0.1, 10)


async def test_seeks_then_resumes_when_the_lookup_answers() -> None:
    consumer = _Consumer({P1: 3}, {P0: OffsetAndTimestamp(4, AT)})
    source = KafkaSource(KafkaSettings(start_from=WHEN), ["traces"])
    source._consumer = consumer  # type: ignore[assignment]
    await source._position([P0, P1])
    assert consumer.seeks == {P0: 4}
    assert not consumer.paused


async def test_intake_resuming_during_the_lookup_leaves_those_partitions_paused() -> None:
    # Backpressure resumes every assigned partition once a slot frees, and the lookup can
    # take seconds: the partitions being positioned then fetched from auto_offset_reset's
    # position (earliest: records before start_from were evaluated and committed).
    consumer = _Consumer({}, {P0: OffsetAndTimestamp(4, AT), P1: OffsetAndTimestamp(9, AT)})
    consumer.answer = asyncio.Event()
    consumer.paused = {P2, P3}  # paused by backpressure before the rebalance
    source = KafkaSource(KafkaSettings(start_from=WHEN), ["traces"])
    source._consumer = consumer  # type: ignore[assignment]
    positioning = asyncio.create_task(source._position([P0, P1]))
    await asyncio.sleep(0)
    assert consumer.paused == {P0, P1, P2, P3}
    source.resume()  # a slot freed while the broker is asked
    assert consumer.paused == {P0, P1}
    consumer.answer.set()
    await positioning
    assert consumer.seeks == {P0: 4, P1: 9}
    assert not consumer.paused
    source.pause()
    source.resume()  # seeked: ordinary partitions again
    assert not consumer.paused


async def test_without_start_from_nothing_is_asked() -> None:
    consumer = _Consumer({}, {}, fail=AssertionError("no lookup without start_from"))
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = consumer  # type: ignore[assignment]
    await source._position([P0])
    assert not consumer.paused
    assert not consumer.seeks
