"""``run --until-caught-up``: stop once every partition is done up to where it ended.

For a backfill run as a Kubernetes Job: the worker ends (a normal stop, exit 0) once each
assigned partition's committed offset reached the end offset it had when it was first
assigned, so traffic written meanwhile does not keep the Job running. A partition whose
start position was already at that end has nothing to do. Stopped any other way before
that (SIGTERM from a node drain or an eviction), it exits 1: a Job counts exit 0 as done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evalstream.app.offsets import OffsetTracker
from evalstream.logging import get_logger
from evalstream.sources.base import TP, Source

__all__ = ["CaughtUp", "watch_caught_up"]

log = get_logger(__name__)


@dataclass
class _Target:
    end: int | None = None
    start: int | None = None


class CaughtUp:
    """Where each partition ended at its first assignment, and whether it got there.

    Args:
        source: Asked for end offsets and positions.
        tracker: Knows what was committed.
    """

    def __init__(self, source: Source, tracker: OffsetTracker) -> None:
        self._source = source
        self._tracker = tracker
        self._targets: dict[TP, _Target] = {}
        #: Set once :func:`watch_caught_up` saw every partition done (the Job's exit 0).
        self.finished = False

    async def assigned(self, tps: Sequence[TP]) -> None:
        """Note the end (first assignment only) and start of ``tps``.

        The start is taken anew at every assignment: after a rebalance the partition
        resumes from its commit. Records may be fetched while it is asked for, so it
        counts only for a partition nothing was taken from (``_done``).
        """
        new = [tp for tp in tps if tp not in self._targets]
        ends = await self._source.end_offsets(new) if new else {}
        starts = await self._source.positions(tps)
        for tp in tps:
            target = self._targets.setdefault(tp, _Target())
            if tp in ends:
                target.end = ends[tp]
            target.start = starts.get(tp)

    async def reached(self) -> bool:
        """Whether every assigned partition (there is one at least) is done."""
        assigned = sorted(self._source.assignment())
        if not assigned:
            return False
        targets = self._targets
        # A partition with no target yet (never noted as assigned) knows neither: tested
        # by membership, not with a throwaway empty _Target built for every partition.
        unknown = [tp for tp in assigned if tp not in targets or targets[tp].end is None]
        if unknown:  # the broker did not answer at assignment: a later end is still one
            for tp, end in (await self._source.end_offsets(unknown)).items():
                targets.setdefault(tp, _Target()).end = end
        # Nor about the start: with nothing taken since, the position still is the start,
        # and a partition with nothing to do never commits, so without it the Job waits.
        unknown = [tp for tp in assigned if (tp not in targets or targets[tp].start is None)
                   and not self._tracker.taken(tp)]
        if unknown:
            for tp, start in (await self._source.positions(unknown)).items():
                targets.setdefault(tp, _Target()).start = start
        return all(self._done(tp) for tp in assigned)

    def _done(self, tp: TP) -> bool:
        target = self._targets.get(tp)
        if target is None or target.end is None:
            return False
        committed = self._tracker.committed_offset(tp)
        if committed is not None and committed >= target.end:
            return True
        # The start says "nothing to do" only while nothing was taken: it is read after an
        # await, when the message path may already hold records up to the end, not yet
        # evaluated (let alone committed).
        return (target.start is not None and target.start >= target.end
                and not self._tracker.taken(tp))

    def ends(self) -> dict[str, int | None]:
        """The target end of each partition, for the log line."""
        return {f"{t}:{p}": target.end for (t, p), target in sorted(self._targets.items())}


async def watch_caught_up(caught_up: CaughtUp, stop: Callable[[], None],
                          interval_s: float) -> None:
    """Every ``interval_s``, check whether every partition is done; then ``stop`` once."""
    while True:
        await asyncio.sleep(interval_s)
        if await caught_up.reached():
            caught_up.finished = True
            log.info("caught_up", ends=caught_up.ends())
            stop()
            return
