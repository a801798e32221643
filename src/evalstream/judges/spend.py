"""A judge's spend over a rolling time window, for its spend cap (``spend_cap_usd``).

Spend is added to fixed-width time buckets (``window_s / buckets`` wide); the window's spend
is the sum of the buckets that started less than ``window_s`` ago. Memory is bounded by the
bucket count whatever the request rate, and a bucket leaves the window all at once, so the
window is between ``window_s - width`` and ``window_s`` long: coarse by one bucket (1/60 of
the window by default), never unbounded.

The cap is per process: each worker replica keeps its own window, in memory only (a
restarted worker starts from zero).

At the cap a judge either refuses (``on_spend_cap: error``: ``JudgeSpendCapError``, an
error result) or waits (``wait``): the request raises :class:`SpendCapWait`, which the
judge catches to :meth:`SpendCap.wait_for_room` until the oldest spend leaves the window,
then asks again. The wait holds the evaluation's slot, so the worker's backpressure turns
the cap into consumer lag instead of error results; a stop or a revoke cancels it (the
judge's ``waits.StoppableWaits``).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable

from evalstream.errors import JudgeSpendCapError
from evalstream.judges.waits import StoppableWaits
from evalstream.logging import get_logger

__all__ = ["SpendCap", "SpendCapWait", "SpendWindow"]

_log = get_logger(__name__)

# The shortest wait before the window is looked at again: a bucket is due to leave at a
# time computed in floating point, and a wait of 0 there must not spin.
_MIN_RECHECK_S = 0.001


class SpendCapWait(Exception):
    """The spend cap is reached and the judge waits for room (``on_spend_cap: wait``).

    Raised where a request would be refused, before anything is sent; the judge catches it
    outside its deadline, waits with :meth:`SpendCap.wait_for_room` and asks again. Not a
    ``JudgeError``: it never becomes an error result.
    """


class SpendWindow:
    """USD spent within the last ``window_s`` seconds, in at most ``buckets`` buckets.

    Args:
        window_s: The window's length in seconds.
        buckets: How many time buckets the window is cut into (its resolution and memory).
        clock: Monotonic seconds; injected by tests.
    """

    def __init__(self, window_s: float, *, buckets: int = 60,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be > 0 and buckets >= 1")
        self.window_s = window_s
        self._width = window_s / buckets
        self._count = buckets
        self._clock = clock
        # (bucket index, USD) oldest first; at most ``buckets`` entries once expired ones go.
        self._buckets: deque[tuple[int, float]] = deque()
        # The gauge reads total() from the metrics server's thread while the event loop adds.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Buckets currently held (bounded by ``buckets``)."""
        with self._lock:
            self._expire(self._index())
            return len(self._buckets)

    def _index(self) -> int:
        return math.floor(self._clock() / self._width)

    def _expire(self, now: int) -> None:
        while self._buckets and self._buckets[0][0] <= now - self._count:
            self._buckets.popleft()

    def add(self, usd: float) -> None:
        """Count ``usd`` spent now (zero and negative amounts are ignored)."""
        if not usd > 0:  # also drops NaN
            return
        with self._lock:
            now = self._index()
            self._expire(now)
            if self._buckets and self._buckets[-1][0] == now:
                self._buckets[-1] = (now, self._buckets[-1][1] + usd)
            else:
                self._buckets.append((now, usd))

    def total(self) -> float:
        """USD spent within the window."""
        with self._lock:
            self._expire(self._index())
            return sum(usd for _, usd in self._buckets)

    def seconds_until_release(self) -> float:
        """Seconds until the oldest spend still counted leaves the window (0 when none)."""
        with self._lock:
            self._expire(self._index())
            if not self._buckets:
                return 0.0
            leaves_at = (self._buckets[0][0] + self._count) * self._width
            return max(0.0, leaves_at - self._clock())


class SpendCap:
    """A judge's spend cap: ``check`` refuses (or asks to wait) while the window is at the cap.

    Args:
        judge: The judge's name (messages, the log).
        cap_usd: The cap; None counts spend (for the gauge) and never refuses.
        window: Where the judge's spend is added.
        on_refused: Called once per refused request, and once per wait of a held one (the
            ``capped`` request count).
        wait: At the cap, raise :class:`SpendCapWait` (the judge then waits for room)
            instead of ``JudgeSpendCapError`` (``on_spend_cap: wait``).
        sleep: How a wait sleeps; injected by tests with a fake clock.
        waits: The judge's waits, for a stop or a revoke to cancel (its own when None).
    """

    def __init__(self, judge: str, cap_usd: float | None, window: SpendWindow,
                 on_refused: Callable[[], None], *, wait: bool = False,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 waits: StoppableWaits | None = None) -> None:
        self.judge = judge
        self.cap_usd = cap_usd
        self.window = window
        self.wait = wait
        self._on_refused = on_refused
        self._sleep = sleep
        self._logged = False
        #: Where a wait for room is held, so a stop can cancel it (its evaluation is then
        #: left uncommitted and redelivered) rather than wait out the window.
        self.waits = waits if waits is not None else StoppableWaits()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Requests waiting for the window to have room (the gauge)."""
        return self._waiting

    def add(self, usd: float) -> None:
        """Count ``usd`` spent now."""
        self.window.add(usd)

    def check(self) -> None:
        """Return when a request may be sent.

        Raises:
            JudgeSpendCapError: the window's spend has reached the cap (nothing may be sent).
            SpendCapWait: the same, when the judge waits at its cap instead.
        """
        cap = self.cap_usd
        if cap is None:
            return
        spent = self.window.total()
        if spent < cap:
            self._logged = False
            return
        if self.wait:
            raise SpendCapWait
        self._on_refused()
        release = self.window.seconds_until_release()
        if not self._logged:
            # Once per capped spell, not per refused request (they may be thousands).
            self._logged = True
            _log.warning("judge_spend_capped", judge=self.judge, cap_usd=cap,
                         spent_usd=round(spent, 6), release_in_s=round(release, 1))
        raise JudgeSpendCapError(
            f"judge {self.judge!r}: spend cap reached (${spent:.4f} of spend_cap_usd "
            f"${cap:g} within the last {self.window.window_s:g}s); no request sent; spend "
            f"starts leaving the window in {release:.0f}s")

    async def wait_for_room(self) -> None:
        """Wait until the window's spend is below the cap: until its oldest spend leaves
        the window, again while that is not enough. Counted once as ``capped``.

        Raises:
            asyncio.CancelledError: the worker is stopping, or this wait's scope was given
                up (``StoppableWaits.stop`` on :attr:`waits`).
        """
        with self.waits.holding():
            self._waiting += 1
            try:
                await self._wait_for_room()
            finally:
                self._waiting -= 1

    async def _wait_for_room(self) -> None:
        self._on_refused()
        while self.cap_usd is not None and (spent := self.window.total()) >= self.cap_usd:
            release = self.window.seconds_until_release()
            if not self._logged:
                self._logged = True
                _log.warning("judge_spend_cap_waiting", judge=self.judge,
                             cap_usd=self.cap_usd, spent_usd=round(spent, 6),
                             release_in_s=round(release, 1))
            await self._sleep(max(release, _MIN_RECHECK_S))
