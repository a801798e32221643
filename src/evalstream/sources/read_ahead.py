"""Batches fetched ahead of intake, bounded by the bytes of their values.

aiokafka sends a node its next fetch request only once the records of the last response
are taken from it (or 100 ms later), and ``getmany`` never yields to the event loop while
it has records buffered. A worker that takes one batch at a time therefore works through a
response, then waits idle while the broker reads, sends and aiokafka receives the next one:
on one core, the idle share grows with the work per message. Taking the whole buffered
response at once (``getmany`` without waiting) lets the next request go out right away, so
the broker serves it while intake works; intake then takes from here. This is that queue:
first in, first out, holding what was fetched in fetch order, and dropping what belongs to
partitions that are revoked (their records are fetched again by whoever owns them next,
from the committed offsets).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from evalstream.sources.base import TP

__all__ = ["ReadAhead"]

#: One fetched batch: aiokafka's ``ConsumerRecord``s by partition, in offset order.
Batch = Mapping[TP, Sequence[Any]]


def _size(batch: Batch) -> int:
    # ``serialized_value_size`` is a stored field (-1 for a null value): summing it costs
    # a third of measuring each value, and the bound is approximate anyway.
    return sum([r.serialized_value_size for records in batch.values() for r in records])


class ReadAhead:
    """A FIFO of fetched batches holding about ``limit`` bytes of values at most.

    ``full`` says when to stop reading ahead; a batch is always accepted, so one larger
    than ``limit`` is held on its own.

    Args:
        limit: The bytes of values to read ahead (``kafka.prefetch_bytes``), > 0.
    """

    __slots__ = ("_batches", "bytes", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: The bytes of values held now.
        self.bytes = 0
        self._batches: deque[tuple[Batch, int]] = deque()

    def __bool__(self) -> bool:
        return bool(self._batches)

    @property
    def full(self) -> bool:
        """Whether the values held reach ``limit``."""
        return self.bytes >= self.limit

    def push(self, batch: Batch) -> None:
        """Hold ``batch`` after those already held."""
        size = _size(batch)
        self._batches.append((batch, size))
        self.bytes += size

    def take(self, max_records: int) -> Batch:
        """The oldest batch, or its first ``max_records`` records (the rest stays first in
        line). Empty when nothing is held."""
        if not self._batches:
            return {}
        batch, size = self._batches.popleft()
        self.bytes -= size
        if sum(len(records) for records in batch.values()) <= max_records:
            return batch
        taken: dict[TP, Sequence[Any]] = {}
        rest: dict[TP, Sequence[Any]] = {}
        room = max_records
        for tp, records in batch.items():
            if room >= len(records):
                taken[tp] = records
            elif room > 0:
                taken[tp], rest[tp] = records[:room], records[room:]
            else:
                rest[tp] = records
            room = max(0, room - len(records))
        rest_size = _size(rest)
        self._batches.appendleft((rest, rest_size))
        self.bytes += rest_size
        return taken

    def drop(self, tps: Collection[TP]) -> None:
        """Forget the records of ``tps`` (revoked: not ours to hand out any more)."""
        if not self._batches or not tps:
            return
        kept: deque[tuple[Batch, int]] = deque()
        for batch, size in self._batches:
            if not any(tp in tps for tp in batch):
                kept.append((batch, size))
                continue
            rest = {tp: records for tp, records in batch.items() if tp not in tps}
            if rest:
                kept.append((rest, _size(rest)))
        self._batches = kept
        self.bytes = sum(size for _, size in kept)

    def first_offset(self, tp: TP) -> int | None:
        """The offset of the first record of ``tp`` held, or None."""
        for batch, _ in self._batches:
            records = batch.get(tp)
            if records:
                return int(records[0].offset)
        return None

    def clear(self) -> None:
        """Forget everything held."""
        self._batches.clear()
        self.bytes = 0
