"""Per-partition commit watermarks for out-of-order completion.

Messages of a partition arrive in offset order but their evaluations finish in any order.
Each tracked offset carries a count of outstanding pieces of work (evaluations whose
results are not yet acknowledged, a dead letter not yet acknowledged). The committable
position of a partition is the lowest offset still outstanding, or one past the last
tracked offset when nothing is outstanding, so a commit never covers unfinished work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["TP", "OffsetTracker", "PartitionState"]

#: (topic, partition)
TP = tuple[str, int]


class PartitionState:
    """One partition's outstanding work; handed out by ``track`` and given back to ``done``.

    A revoke replaces the state, so work that completes after its partition was revoked
    (and perhaps assigned back, with the same offsets tracked anew) cannot touch the new
    state: ``done`` ignores states that are no longer current.
    """

    # Weakly referable: the judges remember revoked states (wait scopes) weakly.
    __slots__ = ("__weakref__", "committed", "end", "fetched", "hold", "order", "remaining",
                 "tp")

    def __init__(self, tp: TP) -> None:
        self.tp = tp
        self.order: deque[int] = deque()
        self.remaining: dict[int, int] = {}
        self.end: int | None = None
        self.committed: int | None = None
        #: The lowest offset with abandoned work: commits never pass it.
        self.hold: int | None = None
        #: The first offset taken from the source while nothing was handled yet (lag only).
        self.fetched: int | None = None

    def position(self) -> int | None:
        """The offset a commit may cover up to, or None when nothing was tracked yet.

        The lowest offset with work outstanding (or one past the last tracked one when none
        is), never past ``hold``.
        """
        position = self.order[0] if self.order else self.end
        if self.hold is not None and (position is None or position > self.hold):
            return self.hold
        return position


class OffsetTracker:
    """Tracks outstanding work per offset and yields the offsets safe to commit."""

    def __init__(self) -> None:
        self._parts: dict[TP, PartitionState] = {}
        self._outstanding = 0

    def assign(self, tps: Iterable[TP]) -> None:
        """Start tracking these partitions (fresh state)."""
        for tp in tps:
            self._parts[tp] = PartitionState(tp)

    def revoke(self, tps: Iterable[TP]) -> None:
        """Forget these partitions; work still finishing for them is ignored."""
        for tp in tps:
            part = self._parts.pop(tp, None)
            if part is not None:
                self._outstanding -= sum(part.remaining.values())

    def states(self, tps: Iterable[TP]) -> list[PartitionState]:
        """The current states of those of ``tps`` that are tracked."""
        return [part for tp in tps if (part := self._parts.get(tp)) is not None]

    def is_assigned(self, tp: TP) -> bool:
        """Whether ``tp`` is tracked (records of revoked partitions are dropped)."""
        return tp in self._parts

    def track(self, tp: TP, offset: int, pending: int) -> PartitionState | None:
        """Record that ``offset`` was taken with ``pending`` pieces of work (0: complete).

        Returns:
            The state to pass to :meth:`done` for each piece, or None when ``tp`` is not
            assigned (its records are dropped, not tracked).
        """
        part = self._parts.get(tp)
        if part is None:
            return None
        part.end = offset + 1
        if pending <= 0:
            # Complete already: ``end`` covers it once the offsets before it are done. Kept
            # in ``order`` behind a slow evaluation, such offsets piled up one entry each
            # for as long as it ran (intake goes on while slots are free).
            return part
        part.order.append(offset)
        part.remaining[offset] = pending
        self._outstanding += pending
        return part

    def advance(self, tp: TP, end: int) -> None:
        """Offsets of ``tp`` below ``end`` not tracked otherwise produced no work.

        One step for a whole run of skipped messages (a fetched batch's last offset + 1):
        they need no entry each, since the committable position is the lowest outstanding
        offset, or ``end`` when nothing is outstanding.
        """
        part = self._parts.get(tp)
        if part is not None and (part.end is None or end > part.end):
            part.end = end

    def fetched(self, tp: TP, offset: int) -> None:
        """Records of ``tp`` from ``offset`` on were taken from the source, not yet handled.

        Noted only while nothing of ``tp`` was handled since it was assigned: from then on
        ``end`` and the outstanding offsets tell where the unfinished work starts.
        """
        part = self._parts.get(tp)
        if part is not None and part.end is None and part.fetched is None:
            part.fetched = offset

    def unfinished(self, tp: TP) -> int | None:
        """The lowest offset of ``tp`` whose work is not complete (what a commit would reach
        once the work before it is done); None when nothing of ``tp`` was taken since it was
        assigned, or it is not assigned.

        Messages fetched and waiting for an evaluation slot, evaluated, or held in a session
        window are at or past it, while the source's position is past all of them: lag
        counted from here is the work not done (``evalstream_consumer_lag_messages``).
        """
        part = self._parts.get(tp)
        if part is None:
            return None
        position = part.position()
        return part.fetched if position is None else position

    def done(self, part: PartitionState, offset: int) -> None:
        """One piece of work of ``offset`` is complete (acknowledged)."""
        if self._parts.get(part.tp) is not part or offset not in part.remaining:
            return  # the partition was revoked meanwhile: this state is history
        part.remaining[offset] -= 1
        self._outstanding -= 1
        order, remaining = part.order, part.remaining
        while order and remaining[order[0]] <= 0:
            del remaining[order.popleft()]

    def abandon(self, part: PartitionState, offset: int, pieces: int) -> None:
        """``pieces`` of ``offset``'s work will never start (its partition is being revoked).

        They stop counting as outstanding, so waiting for the partition's work to finish
        does not wait for them, and the partition is never committed past ``offset``: the
        message is redelivered to the partition's next owner.
        """
        if self._parts.get(part.tp) is not part or offset not in part.remaining:
            return
        part.remaining[offset] -= pieces
        self._outstanding -= pieces
        if part.hold is None or offset < part.hold:
            part.hold = offset

    def pending(self, tps: Iterable[TP] | None = None) -> int:
        """Outstanding work in ``tps`` (all partitions when None)."""
        if tps is None:
            return self._outstanding
        return sum(sum(self._parts[tp].remaining.values()) for tp in tps if tp in self._parts)

    def committable(self, tps: Iterable[TP] | None = None) -> dict[TP, int]:
        """Positions that advanced past the last commit (next offset to consume)."""
        out: dict[TP, int] = {}
        items = self._parts.items() if tps is None else (
            (tp, self._parts[tp]) for tp in tps if tp in self._parts)
        for tp, part in items:
            position = part.position()
            if position is not None and position != part.committed:
                out[tp] = position
        return out

    def taken(self, tp: TP) -> bool:
        """Whether any record of ``tp`` was tracked or advanced over since it was assigned."""
        part = self._parts.get(tp)
        return part is not None and part.end is not None

    def committed_offset(self, tp: TP) -> int | None:
        """The last offset committed for ``tp`` since it was assigned, if any."""
        part = self._parts.get(tp)
        return None if part is None else part.committed

    def committed(self, offsets: dict[TP, int]) -> None:
        """Record that ``offsets`` were committed."""
        for tp, position in offsets.items():
            part = self._parts.get(tp)
            if part is not None:
                part.committed = position
