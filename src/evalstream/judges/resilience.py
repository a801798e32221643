"""Resilience primitives for remote judges: token buckets, a circuit breaker, backoff.

All of them *wait* rather than fail: a caller that is rate limited or meets an open
circuit sleeps, which holds its evaluation slot and so backpressures the Kafka consumer.
The caller's deadline (``asyncio.timeout``) is what finally gives up, or a stop or a revoke:
each says whether it would wait now (``would_wait``, ``paused``), and the caller then holds
that wait where a stop cancels it (``waits.StoppableWaits``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import enum
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["CircuitBreaker", "CircuitState", "PauseGate", "TokenBucket", "backoff_delay",
           "parse_retry_after"]


class TokenBucket:
    """A token bucket: ``rate`` tokens per second, bursts up to ``capacity``.

    Waiters are served in arrival order (one lock), so a large request cannot be starved by
    a stream of small ones. The balance may go negative when :meth:`debit` corrects an
    estimate after the fact; later takers then wait for the debt to refill.
    """

    def __init__(self, rate: float, capacity: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.capacity = capacity
        self._tokens = capacity
        self._clock = clock
        self._stamp = clock()
        self._lock = asyncio.Lock()
        # Callers in take(), waiting or not: a newcomer queues behind them.
        self._takers = 0

    def would_wait(self, amount: float = 1.0) -> bool:
        """Whether :meth:`take` of ``amount`` would wait now: others take first (arrival
        order), or the bucket holds too few tokens."""
        if self._takers:
            return True
        # The refill take() would do first, done here: one formula for the balance.
        self._refill()
        return self._tokens < min(amount, self.capacity)

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now

    async def take(self, amount: float = 1.0) -> float:
        """Wait until ``amount`` tokens are available and take them; return the wait (s)."""
        amount = min(amount, self.capacity)  # a request larger than a burst still passes
        waited = 0.0
        self._takers += 1
        try:
            async with self._lock:
                while True:
                    self._refill()
                    if self._tokens >= amount:
                        self._tokens -= amount
                        return waited
                    delay = (amount - self._tokens) / self.rate
                    waited += delay
                    await asyncio.sleep(delay)
        finally:
            self._takers -= 1

    def debit(self, amount: float) -> None:
        """Take ``amount`` more without waiting (actual usage exceeded the estimate)."""
        self._refill()
        self._tokens -= amount


class PauseGate:
    """A judge-wide pause after rate limiting: a shared "not before" time, then one probe.

    :meth:`hold` moves the time later (never earlier), so the longest pause asked for wins.
    :meth:`acquire` sleeps until it has passed (again if it moved meanwhile), each waiter
    with its own jitter. Once a pause has passed, one request goes first as the probe and
    the others wait for its outcome (:meth:`settle`): rate limited again, a new pause has
    been set and they wait it out; anything else lifts the pause for all. So while a
    server keeps rate limiting, about one request per pause reaches it, not every waiting
    request at once. Any request answered other than rate limited (probe or not) lifts it:
    a 429 that is no rate limit (``insufficient_quota``: no credit) lifts it too.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self._until = 0.0
        # A pause was held and no request has been answered (other than rate limited) since.
        self._tripped = False
        self._probing = False
        self._settled = asyncio.Event()
        self._clock = clock
        self._rng = rng or random.Random()

    @property
    def paused(self) -> bool:
        """Whether requests are held back (a pause, or its probe's outcome, is awaited)."""
        return self._tripped

    def remaining(self) -> float:
        """Seconds until the pause ends (0 when there is none)."""
        return max(0.0, self._until - self._clock())

    def hold(self, seconds: float) -> float:
        """Pause until ``seconds`` from now, unless a pause already lasts longer.

        Returns:
            The seconds this added to the pause (0 when it already lasted as long).
        """
        now = self._clock()
        until = now + seconds
        if not until > max(self._until, now):  # also refuses a NaN
            return 0.0
        added = until - max(self._until, now)
        self._until = until
        self._tripped = True
        return added

    async def acquire(self, jitter_s: float = 0.0) -> bool:
        """Wait until a request may go. Returns True when it goes as the pause's probe.

        The caller must :meth:`settle` or :meth:`abandon` with what this returned.
        """
        while True:
            left = self.remaining()
            if left > 0:
                await asyncio.sleep(left + self._rng.uniform(0, jitter_s))
                continue
            if not self._tripped:
                return False
            if not self._probing:
                self._probing = True
                return True
            await self._settled.wait()

    def settle(self, probe: bool, *, rate_limited: bool) -> None:
        """A request's outcome: ``rate_limited`` (a retryable 429; :meth:`hold` was called
        for it first) keeps the judge paused; any other answer lifts the pause's hold."""
        if not rate_limited:
            self._tripped = False
        if probe or not rate_limited:
            self._release(probe)

    def abandon(self, probe: bool) -> None:
        """A request ended without an outcome (cancelled): free the probe's place."""
        self._release(probe)

    def _release(self, probe: bool) -> None:
        if probe:
            self._probing = False
        # Wakes the requests waiting for the probe: they look again (lifted, paused anew,
        # or, the probe abandoned, one of them probes). A fresh event for the next wait:
        # one left set would make every later wait return at once, a busy loop.
        self._settled.set()
        self._settled = asyncio.Event()


class CircuitState(enum.IntEnum):
    """Gauge values: 0 closed, 1 half-open, 2 open."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    """Closed -> open after ``failures`` consecutive failures; half-open after ``reset_s``.

    While open, :meth:`acquire` waits (it never raises). In half-open one probe request is
    let through; its success closes the circuit, its failure opens it again for another
    ``reset_s``. ``on_change`` receives every new state (the metrics gauge).
    """

    def __init__(self, failures: int, reset_s: float,
                 on_change: Callable[[CircuitState], None] = lambda _s: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = failures
        self.reset_s = reset_s
        self.state = CircuitState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False
        self._on_change = on_change
        self._clock = clock
        self._cond = asyncio.Condition()

    def _set(self, state: CircuitState) -> None:
        if state is not self.state:
            self.state = state
            self._on_change(state)
        if state is CircuitState.OPEN:
            self._opened_at = self._clock()

    def would_wait(self) -> bool:
        """Whether :meth:`acquire` would wait now: open and not yet due for a probe, or
        half-open with its probe out."""
        if self.state is CircuitState.OPEN:
            return self._opened_at + self.reset_s - self._clock() > 0
        return self.state is CircuitState.HALF_OPEN and self._probing

    async def acquire(self) -> bool:
        """Wait until a request may go out. Returns True when it is the half-open probe."""
        async with self._cond:
            while True:
                if self.state is CircuitState.CLOSED:
                    return False
                if self.state is CircuitState.OPEN:
                    wait = self._opened_at + self.reset_s - self._clock()
                    if wait <= 0:
                        self._set(CircuitState.HALF_OPEN)
                        self._probing = True
                        return True
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for can drop the
                    # cancel of a request whose deadline passed as the wait ended.
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await self._cond.wait()
                    continue
                if not self._probing:
                    self._probing = True
                    return True
                await self._cond.wait()

    async def record(self, ok: bool, *, probe: bool = False) -> None:
        """Record an outcome: ``ok`` = the backend answered (even with a client error)."""
        async with self._cond:
            if probe:
                self._probing = False
            if ok:
                self._consecutive = 0
                self._set(CircuitState.CLOSED)
            else:
                self._consecutive += 1
                if probe or (self.state is CircuitState.CLOSED
                             and self._consecutive >= self.failures):
                    self._set(CircuitState.OPEN)
            self._cond.notify_all()

    async def abandon(self, *, probe: bool) -> None:
        """A request ended without an outcome (cancelled): free the probe slot."""
        if probe:
            # Freed before waiting for the lock: no outcome will come, and a caller that is
            # cancelled again while waiting must not keep the slot (the next acquire() that
            # gets the lock takes the probe even if this notify never runs).
            self._probing = False
            async with self._cond:
                self._cond.notify_all()


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Seconds before retry number ``attempt`` (1-based).

    "Full jitter" exponential backoff (uniform in [base, min(cap, base * 2**attempt)]) so
    many workers that failed together do not retry together; a server's ``Retry-After`` is
    a floor, honoured even above ``cap`` (the caller's deadline still bounds the wait).
    """
    r = rng or random
    # The exponent is bounded: retries until a deadline (rate limiting) may count past
    # 1024 attempts with a small base, and base * 2**1100 is an OverflowError, not inf.
    ceiling = min(cap, base * (2 ** min(attempt, 64)))
    delay = r.uniform(min(base, ceiling), ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after + r.uniform(0, base / 2))
    return delay


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
