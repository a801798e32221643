"""Committing completed offsets: periodically, on revoke, and once more at shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from evalstream.app.offsets import TP, OffsetTracker
from evalstream.errors import SourceError
from evalstream.logging import get_logger
from evalstream.metrics import Metrics
from evalstream.sources.base import Source

__all__ = ["Committer"]

log = get_logger(__name__)


class Committer:
    """Commits what the tracker says is complete; one commit at a time.

    Args:
        tracker: Which offsets are complete.
        source: Where commits go.
        metrics: ``evalstream_offset_commits_total`` by outcome.
    """

    def __init__(self, tracker: OffsetTracker, source: Source, metrics: Metrics) -> None:
        self._tracker = tracker
        self._source = source
        self._ok = metrics.commits.labels("ok")
        self._error = metrics.commits.labels("error")
        self._lock = asyncio.Lock()
        self._progress = asyncio.Event()

    def progressed(self) -> None:
        """Some work completed (wakes :meth:`until_idle`)."""
        self._progress.set()

    async def until_idle(self, tps: Sequence[TP] | None = None) -> None:
        """Return once no work is outstanding in ``tps`` (all partitions when None)."""
        while self._tracker.pending(tps) > 0:
            self._progress.clear()
            await self._progress.wait()

    async def commit(self, tps: Sequence[TP] | None = None) -> None:
        """Commit the positions that advanced. A failed commit is logged and retried later
        (the next commit covers it), never fatal: at worst work is redelivered."""
        async with self._lock:
            offsets = self._tracker.committable(tps)
            if not offsets:
                return
            try:
                await self._source.commit(offsets)
            except SourceError as exc:
                self._error.inc()
                log.warning("commit_failed", error=str(exc))
                return
            except Exception as exc:
                # Not a declared failure (a client bug): counted and retried the same way.
                # Raised, it ended the commit loop for good, silently, while intake went on.
                self._error.inc()
                log.error("commit_failed", error_type=type(exc).__name__)
                return
            self._tracker.committed(offsets)
            self._ok.inc()

    async def run(self, interval_s: float) -> None:
        """Commit every ``interval_s`` until cancelled."""
        while True:
            await asyncio.sleep(interval_s)
            await self.commit()
