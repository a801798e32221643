"""The source contract: batches of raw records in, commits and flow control out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from evalstream.events import Record

__all__ = ["TP", "RebalanceHandler", "Source", "Unfinished"]

#: (topic, partition)
TP = tuple[str, int]

#: The lowest offset of a partition whose work is not complete, or None where nothing was
#: taken from it yet (given by the worker, which alone knows: ``OffsetTracker.unfinished``).
Unfinished = Callable[[TP], int | None]


class RebalanceHandler(Protocol):
    """Told when partitions come and go, so work can be finished and committed in time."""

    async def on_assigned(self, tps: Sequence[TP]) -> None:
        """``tps`` are now ours; consumption starts at their committed offsets."""
        ...

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        """``tps`` are about to go: finish or abandon their work and commit what is done."""
        ...


class Source(Protocol):
    """Where messages come from (Kafka in production, memory in unit tests)."""

    @property
    def connected(self) -> bool:
        """Whether the source is connected to its broker (as of the last ``check``)."""
        ...

    async def check(self, timeout_s: float) -> None:
        """Refresh ``connected`` with a round trip to the broker, within ``timeout_s``."""
        ...

    async def start(self, handler: RebalanceHandler) -> None:
        """Connect and subscribe; ``handler`` hears about (re)assignments."""
        ...

    async def poll(self, timeout_s: float, max_records: int) -> Mapping[TP, Sequence[Record]]:
        """Up to ``max_records`` records by partition, each in offset order (may be empty)."""
        ...

    def assignment(self) -> set[TP]:
        """The partitions currently assigned."""
        ...

    def pause(self) -> None:
        """Stop fetching from every assigned partition (backpressure)."""
        ...

    def resume(self) -> None:
        """Fetch again."""
        ...

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit ``offsets`` (the next offset to consume per partition).

        Raises:
            SourceError: the commit failed (e.g. the partition was reassigned).
        """
        ...

    async def lag(self, unfinished: Unfinished | None = None) -> dict[TP, int]:
        """Messages not yet done per assigned partition whose end offset is known: the end
        minus ``unfinished(tp)``, or minus the position where that is None (or not given).

        Counted from the position, messages fetched and not yet evaluated would not count.
        """
        ...

    async def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The offsets the next records of ``tps`` will get (those that answered in time)."""
        ...

    async def positions(self, tps: Sequence[TP]) -> dict[TP, int]:
        """The next offsets ``poll`` hands out from the assigned ``tps`` (those known in
        time)."""
        ...

    async def stop(self) -> None:
        """Leave the group and close."""
        ...
