"""The bound on in-flight evaluations (``worker.max_in_flight``) and intake's pause.

An evaluation takes a slot before it starts and gives it back when it ends. When no slot
is free, the source's partitions are paused rather than fetched messages buffered, so
memory stays bounded however slow the judge is; they are resumed once intake finds a slot
free again. The running count and its peak are read by the metrics at scrape time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from evalstream.app.waits import wait_set
from evalstream.metrics import Metrics
from evalstream.sources.base import Source

__all__ = ["InFlight"]


class InFlight:
    """Slots for in-flight evaluations, and the pause of ``source`` while none is free.

    Args:
        limit: The number of slots (``worker.max_in_flight``).
        source: Paused while every slot is taken.
        metrics: ``in_flight`` / ``in_flight_peak`` gauges (read at scrape time: exact, and
            free on the hot path), the ``paused`` gauge and the pause counter.
        clock: Seconds, monotonic (:meth:`reading_clock` counts on it).
    """

    def __init__(self, limit: int, source: Source, metrics: Metrics,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._freed = asyncio.Event()
        self._source = source
        self._metrics = metrics
        self._count = 0
        self._peak = 0
        self._clock = clock
        #: Seconds paused before the current pause, and when that one began.
        self._paused_s = 0.0
        self._paused_at = 0.0
        #: Set while intake reads; clear while it is paused (what ``paused`` reads).
        self._reading = asyncio.Event()
        self._reading.set()
        metrics.in_flight.set_function(lambda: self._count)
        metrics.in_flight_peak.set_function(lambda: self._peak)

    @property
    def count(self) -> int:
        """Evaluations started and not finished."""
        return self._count

    @property
    def peak(self) -> int:
        """The highest ``count`` seen."""
        return self._peak

    @property
    def paused(self) -> bool:
        """Whether the source's partitions are paused for want of a slot."""
        return not self._reading.is_set()

    @property
    def full(self) -> bool:
        """No slot is free."""
        return self._slots.locked()

    async def acquire(self, timeout_s: float | None = None) -> bool:
        """Take a slot, pausing the source first if none is free.

        Returns:
            Whether a slot was taken: False when none was free within ``timeout_s``.
        """
        if self._slots.locked():
            self.set_paused(True)
        if timeout_s is None or not self._slots.locked():
            # A free slot is taken at once: no timeout to arm (the per-evaluation path).
            await self._slots.acquire()
        else:
            # A cancelled Semaphore.acquire gives back a slot it was just handed.
            try:
                async with asyncio.timeout(timeout_s):
                    await self._slots.acquire()
            except TimeoutError:
                return False
        self._count += 1
        if self._count > self._peak:
            self._peak = self._count
        return True

    def release(self) -> None:
        """Give a slot back."""
        self._count -= 1
        self._slots.release()
        self._freed.set()

    async def wait_freed(self, timeout_s: float) -> None:
        """Pause the source and wait up to ``timeout_s`` for a slot to be given back."""
        self.set_paused(True)
        self._freed.clear()
        if self._slots.locked():
            await wait_set(self._freed, timeout_s)

    def reading_clock(self) -> float:
        """Seconds, monotonic, that stand still while intake is paused for want of a slot.

        What session windows time their gap on: while paused nothing is read, so a
        conversation whose next event waits in its partition is unread, not quiet.
        """
        now = self._clock()
        return now - self._paused_s - (now - self._paused_at if self.paused else 0.0)

    async def wait_reading(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for intake to read again (at once when it does)."""
        await wait_set(self._reading, timeout_s)

    def assigned(self) -> None:
        """Partitions were assigned: keep them paused too while intake is paused."""
        if self.paused:
            self._source.pause()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the source's partitions (nothing when already so)."""
        if paused == self.paused:
            return
        if paused:
            self._paused_at = self._clock()
            self._reading.clear()
            self._source.pause()
            self._metrics.backpressure_pauses.inc()
        else:
            self._paused_s += self._clock() - self._paused_at
            self._reading.set()
            self._source.resume()
        self._metrics.paused.set(1 if paused else 0)
