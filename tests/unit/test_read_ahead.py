"""ReadAhead: batches fetched ahead of intake, handed out in order, bounded, revocable."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from evalstream.sources.read_ahead import ReadAhead

A, B = ("traces", 0), ("traces", 1)


def records(tp: tuple[str, int], start: int, n: int, size: int = 100) -> list[ConsumerRecord]:
    return [ConsumerRecord(tp[0], tp[1], offset, 0, 0, None, b"x" * size, None, -1, size, ())
            for offset in range(start, start + n)]


def offsets(batch: dict) -> dict:  # type: ignore[type-arg]
    return {tp: [r.offset for r in rs] for tp, rs in batch.items()}


def test_batches_come_out_in_the_order_they_went_in_and_count_their_bytes() -> None:
    ahead = ReadAhead(limit=1_000)
    assert not ahead
    assert ahead.take(10) == {}
    ahead.push({A: records(A, 0, 3)})
    ahead.push({A: records(A, 3, 2), B: records(B, 0, 2)})
    assert ahead
    assert ahead.bytes == 700
    assert not ahead.full
    ahead.push({B: records(B, 2, 3)})
    assert ahead.bytes == 1_000
    assert ahead.full
    assert offsets(ahead.take(10)) == {A: [0, 1, 2]}
    assert offsets(ahead.take(10)) == {A: [3, 4], B: [0, 1]}
    assert ahead.bytes == 300
    assert not ahead.full
    assert offsets(ahead.take(10)) == {B: [2, 3, 4]}
    assert not ahead
    assert ahead.bytes == 0


def test_a_smaller_take_leaves_the_rest_first_in_line() -> None:
    # ``MessagePath._keep_polled`` asks for one record while intake waits for a slot.
    ahead = ReadAhead(limit=10_000)
    ahead.push({A: records(A, 0, 3), B: records(B, 0, 2)})
    ahead.push({A: records(A, 3, 1)})
    assert offsets(ahead.take(1)) == {A: [0]}
    assert ahead.bytes == 500
    assert offsets(ahead.take(3)) == {A: [1, 2], B: [0]}
    assert offsets(ahead.take(500)) == {B: [1]}
    assert offsets(ahead.take(500)) == {A: [3]}
    assert not ahead
    assert ahead.bytes == 0


def test_revoked_partitions_are_dropped_and_the_others_kept_in_order() -> None:
    ahead = ReadAhead(limit=10_000)
    ahead.push({A: records(A, 0, 2), B: records(B, 0, 2)})
    ahead.push({B: records(B, 2, 2)})
    ahead.push({A: records(A, 2, 1)})
    ahead.drop({B})
    assert ahead.bytes == 300
    assert ahead.first_offset(B) is None
    assert ahead.first_offset(A) == 0
    assert offsets(ahead.take(500)) == {A: [0, 1]}
    assert ahead.first_offset(A) == 2
    assert offsets(ahead.take(500)) == {A: [2]}
    assert not ahead


def test_a_batch_larger_than_the_limit_is_still_taken() -> None:
    ahead = ReadAhead(limit=50)
    ahead.push({A: records(A, 0, 2)})
    assert ahead.full
    assert offsets(ahead.take(10)) == {A: [0, 1]}


def test_null_values_do_not_unbalance_the_count() -> None:
    ahead = ReadAhead(limit=1_000)
    tombstone = ConsumerRecord("traces", 0, 0, 0, 0, None, None, None, -1, -1, ())
    ahead.push({A: [tombstone]})
    ahead.take(10)
    assert ahead.bytes == 0
