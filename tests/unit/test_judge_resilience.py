"""Edges of the judge resilience primitives not reached by ``test_judge_primitives.py``.

Backoff bounds per attempt, ``Retry-After`` forms, token-bucket refill limits and the
breaker's consecutive-failure count, each checked against what the docstrings promise.
"""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from evalstream.judges.resilience import (
    CircuitBreaker,
    CircuitState,
    TokenBucket,
    backoff_delay,
    parse_retry_after,
)
from tests.support.clock import FakeClock

# --- backoff -------------------------------------------------------------------------


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 1.0), (2, 2.0), (3, 4.0), (6, 8.0)])
def test_backoff_ceiling_doubles_per_attempt_up_to_the_cap(attempt: int,
                                                           ceiling: float) -> None:
    # base 0.5, cap 8: uniform in [base, min(cap, base * 2**attempt)].
    rng = random.Random(attempt)
    delays = [backoff_delay(attempt, 0.5, 8.0, rng=rng) for _ in range(400)]
    assert min(delays) >= 0.5
    assert max(delays) <= ceiling
    # Full jitter spreads over the range, up to near its ceiling.
    assert max(delays) > 0.5 + 0.9 * (ceiling - 0.5)


@pytest.mark.parametrize("attempt", [1100, 10**6])
def test_backoff_of_a_very_late_attempt_is_capped_not_an_overflow(attempt: int) -> None:
    # Retries until a deadline (rate limiting) can count this far with a small base:
    # base * 2**attempt raised OverflowError out of the judge instead of waiting.
    rng = random.Random(attempt)
    delays = [backoff_delay(attempt, 0.001, 0.01, rng=rng) for _ in range(50)]
    assert all(0.001 <= d <= 0.01 for d in delays)


def test_retry_after_is_a_floor_with_bounded_jitter() -> None:
    rng = random.Random(2)
    for _ in range(200):
        delay = backoff_delay(1, 0.5, 4.0, retry_after=30.0, rng=rng)
        # Above the cap (the server asked), plus at most base/2 of jitter.
        assert 30.0 <= delay <= 30.25
    # A Retry-After below the backoff does not shorten it.
    rng = random.Random(3)
    delays = [backoff_delay(3, 1.0, 8.0, retry_after=0.0, rng=rng) for _ in range(200)]
    assert max(delays) > 4.0


# --- Retry-After ---------------------------------------------------------------------


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after("") is None
    assert parse_retry_after("-3") == 0.0  # never a negative wait
    past = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert parse_retry_after(past, now=now) == 0.0
    # A date with "-0000" (no zone information) parses naive: read as UTC.
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:45 -0000", now=now) == pytest.approx(45.0)
    assert parse_retry_after("Thu, 01 Jan 2026 02:00:45 +0200", now=now) == pytest.approx(45.0)


# --- token bucket --------------------------------------------------------------------


async def test_token_bucket_refill_is_capped_at_capacity() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, capacity=3.0, clock=clock)
    assert await bucket.take(3.0) == 0.0
    clock.now = 1000.0  # idle for long: refills to the burst size, not 10 000 tokens
    for _ in range(3):
        assert await bucket.take() == 0.0
    bucket._refill()
    assert bucket._tokens == pytest.approx(0.0)


async def test_token_bucket_refills_at_its_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, capacity=4.0, clock=clock)
    assert await bucket.take(4.0) == 0.0
    clock.now = 0.5  # 2 tokens back
    assert await bucket.take(2.0) == 0.0
    bucket._refill()
    assert bucket._tokens == pytest.approx(0.0)


async def test_a_request_larger_than_a_burst_still_passes() -> None:
    bucket = TokenBucket(rate=1000.0, capacity=2.0)
    waited = await asyncio.wait_for(bucket.take(50.0), 1.0)
    assert waited < 0.1


async def test_debit_without_waiting_puts_the_bucket_in_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100.0, capacity=5.0, clock=clock)
    assert await bucket.take(5.0) == 0.0
    clock.now = 10.0  # idle: refilled to the burst size (5), no more
    bucket.debit(7.0)
    bucket._refill()
    assert bucket._tokens == pytest.approx(-2.0)  # the idle time cannot pay for it again


# --- circuit breaker -----------------------------------------------------------------


async def test_breaker_counts_only_consecutive_failures() -> None:
    breaker = CircuitBreaker(failures=3, reset_s=10.0, clock=FakeClock())
    for _ in range(5):
        await breaker.record(False)
        await breaker.record(False)
        await breaker.record(True)  # an answer resets the run
    assert breaker.state is CircuitState.CLOSED
    await breaker.record(False)
    await breaker.record(False)
    assert breaker.state is CircuitState.CLOSED
    await breaker.record(False)
    assert breaker.state is CircuitState.OPEN


async def test_open_breaker_waits_the_full_reset_time() -> None:
    clock = FakeClock()
    changes: list[CircuitState] = []
    breaker = CircuitBreaker(failures=1, reset_s=10.0, on_change=changes.append, clock=clock)
    clock.now = 100.0
    await breaker.record(False)  # opened at 100
    clock.now = 109.9
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(breaker.acquire(), 0.05)
    assert breaker.state is CircuitState.OPEN
    clock.now = 110.0
    assert await asyncio.wait_for(breaker.acquire(), 1.0) is True
    assert changes == [CircuitState.OPEN, CircuitState.HALF_OPEN]


async def test_a_late_failure_in_half_open_does_not_reopen_without_the_probe() -> None:
    # A request sent before the circuit opened fails after the probe went out: only the
    # probe's own outcome decides (it is the one sent after the reset time).
    clock = FakeClock()
    breaker = CircuitBreaker(failures=1, reset_s=1.0, clock=clock)
    await breaker.record(False)
    clock.now = 1.0
    assert await breaker.acquire() is True
    await breaker.record(False)  # not the probe
    assert breaker.state is CircuitState.HALF_OPEN
    await breaker.record(True, probe=True)
    assert breaker.state is CircuitState.CLOSED
    assert await breaker.acquire() is False  # closed: no probe


async def test_the_probe_taken_after_an_abandoned_one_is_still_the_only_one() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failures=1, reset_s=1.0, clock=clock)
    await breaker.record(False)
    clock.now = 1.0
    assert await breaker.acquire() is True  # probe 1, then cancelled without an outcome
    await breaker.abandon(probe=True)
    assert await asyncio.wait_for(breaker.acquire(), 1.0) is True  # probe 2
    third = asyncio.create_task(breaker.acquire())
    await asyncio.sleep(0.01)
    assert not third.done()  # still one probe at a time
    await breaker.record(True, probe=True)
    assert await asyncio.wait_for(third, 1.0) is False  # closed: goes out as normal


# --- would_wait: whether the caller is about to wait (a stop may then cancel it) ----------


async def test_token_bucket_would_wait_agrees_with_take() -> None:
    clock = FakeClock(0.0)
    bucket = TokenBucket(rate=1.0, capacity=2.0, clock=clock)
    assert not bucket.would_wait(2.0)
    assert await bucket.take(2.0) == 0.0  # took at once, as would_wait said
    assert bucket.would_wait(1.0)
    clock.now = 0.5
    assert bucket.would_wait(1.0)  # half a token refilled
    assert not bucket.would_wait(0.5)
    clock.now = 1.0
    assert not bucket.would_wait(1.0)
    assert bucket.would_wait(2.0)
    clock.now = 2.0
    assert not bucket.would_wait(50.0)  # more than a burst passes with a full bucket


async def test_token_bucket_would_wait_behind_a_waiting_taker() -> None:
    # Arrival order: with someone waiting in take(), a newcomer queues behind them even if
    # the tokens it asks for are there by the time it looks.
    bucket = TokenBucket(rate=10.0, capacity=1.0)
    await bucket.take(1.0)
    first = asyncio.create_task(bucket.take(1.0))
    await asyncio.sleep(0)
    assert bucket.would_wait(0.001)
    await asyncio.wait_for(first, 1)
    await asyncio.sleep(0.2)  # refilled
    assert not bucket.would_wait(1.0)


async def test_token_bucket_cancelled_taker_leaves_no_queue_behind() -> None:
    bucket = TokenBucket(rate=0.01, capacity=1.0)
    await bucket.take(1.0)
    waiter = asyncio.create_task(bucket.take(1.0))
    await asyncio.sleep(0.01)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    bucket._tokens = 1.0
    assert not bucket.would_wait(1.0)


async def test_breaker_would_wait_while_open_or_while_its_probe_is_out() -> None:
    clock = FakeClock(0.0)
    breaker = CircuitBreaker(failures=1, reset_s=10.0, clock=clock)
    assert not breaker.would_wait()
    await breaker.record(False)
    assert breaker.state is CircuitState.OPEN
    assert breaker.would_wait()
    clock.now = 10.0
    assert not breaker.would_wait()  # due: the next acquire is the probe, at once
    assert await breaker.acquire() is True
    assert breaker.would_wait()  # half-open, probe out
    await breaker.record(True, probe=True)
    assert not breaker.would_wait()
