"""An in-memory source for unit tests: partitions are lists of records."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence

from evalstream.events import RawRecord, Record
from evalstream.sources.base import TP, RebalanceHandler, Unfinished

__all__ = ["MemorySource"]


class MemorySource:
    """Serves records from memory, one partition after another, and records commits.

    Args:
        records: The records to serve, in offset order per partition.
    """

    def __init__(self, records: Iterable[RawRecord] = ()) -> None:
        self._queues: dict[TP, list[RawRecord]] = {}
        self._positions: dict[TP, int] = {}
        self.committed: dict[TP, int] = {}
        self.commits: list[dict[TP, int]] = []
        self.paused = False
        self.pause_count = 0
        self._handler: RebalanceHandler | None = None
        self._connected = False
        for record in records:
            self.add(record)

    @property
    def connected(self) -> bool:
        """True between start and stop."""
        return self._connected

    async def check(self, timeout_s: float) -> None:
        """Nothing to ask: memory is always there."""

    def add(self, record: RawRecord) -> None:
        """Append a record to its partition."""
        tp = (record.topic, record.partition)
        self._queues.setdefault(tp, []).append(record)
        self._positions.setdefault(tp, 0)

    async def start(self, handler: RebalanceHandler) -> None:
        """Assign every partition."""
        self._handler = handler
        self._connected = True
        await handler.on_assigned(sorted(self._queues))

    async def revoke(self, tps: Sequence[TP]) -> None:
        """Simulate a rebalance taking ``tps`` away (positions rewind to the commit)."""
        assert self._handler is not None
        await self._handler.on_revoked(tps)
        for tp in tps:
            self._positions[tp] = self._index(tp, self.committed.get(tp, 0))

    def _index(self, tp: TP, offset: int) -> int:
        for i, record in enumerate(self._queues[tp]):
            if record.offset >= offset:
                return i
        return len(self._queues[tp])

    async def poll(self, timeout_s: float, max_records: int) -> dict[TP, list[Record]]:
        """Up to ``max_records`` records by partition unless paused."""
        out: dict[TP, list[Record]] = {}
        left = max_records
        if not self.paused:
            for tp, queue in self._queues.items():
                start = self._positions[tp]
                take = queue[start:start + left]
                if take:
                    self._positions[tp] = start + len(take)
                    out[tp] = list(take)
                    left -= len(take)
                if left <= 0:
                    break
        if not out:
            await asyncio.sleep(min(timeout_s, 0.01))
        return out

    def assignment(self) -> set[TP]:
        """Every partition."""
        return set(self._queues)

    def pause(self) -> None:
        """Stop serving records."""
        if not self.paused:
            self.pause_count += 1
        self.paused = True

    def resume(self) -> None:
        """Serve records again."""
        self.paused = False

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        """Record the commit."""
        self.commits.append(dict(offsets))
        self.committed.update(offsets)

    async def lag(self, unfinished: Unfinished | None = None) -> dict[TP, int]:
        """Offsets from ``unfinished(tp)`` (else from the position) to the end, per partition."""
        tps = sorted(self._queues)
        ends, positions = await self.end_offsets(tps), await self.positions(tps)
        out: dict[TP, int] = {}
        for tp in tps:
            start = unfinished(tp) if unfinished is not None else None
            out[tp] = max(0, ends[tp] - (positions[tp] if start is None else start))
        return out

    async def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        """One past each partition's last record (0 when empty)."""
        return {tp: self._end(tp) for tp in tps if tp in self._queues}

    def _end(self, tp: TP) -> int:
        queue = self._queues[tp]
        return queue[-1].offset + 1 if queue else 0

    async def positions(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The offset of each partition's next record to hand out."""
        out: dict[TP, int] = {}
        for tp in tps:
            queue = self._queues.get(tp)
            if queue is None:
                continue
            i = self._positions[tp]
            out[tp] = queue[i].offset if i < len(queue) else self._end(tp)
        return out

    async def stop(self) -> None:
        """Disconnect."""
        self._connected = False
