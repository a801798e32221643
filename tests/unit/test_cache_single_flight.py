"""TTLCache as the role caches use it (no expiry): joins, eviction, failures, cancellation."""

from __future__ import annotations

import asyncio
import math

import pytest

from evalstream.judges.cache import TTLCache


async def test_joins_in_flight_and_evicts_oldest() -> None:
    cache: TTLCache[int] = TTLCache(2, math.inf)
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return calls

    joined = await asyncio.gather(cache.get_or_compute("a", compute),
                                  cache.get_or_compute("a", compute))
    assert joined == [(1, False), (1, True)]  # one computation, the second caller joined it
    await cache.get_or_compute("b", compute)
    await cache.get_or_compute("c", compute)  # evicts "a"
    assert len(cache) == 2
    assert await cache.get_or_compute("a", compute) == (4, False)
    assert calls == 4


async def test_failures_are_not_remembered() -> None:
    cache: TTLCache[int] = TTLCache(4, math.inf)

    async def boom() -> int:
        raise ValueError("judge down")

    async def ok() -> int:
        return 7

    with pytest.raises(ValueError, match="judge down"):
        await cache.get_or_compute("k", boom)
    assert await cache.get_or_compute("k", ok) == (7, False)


async def test_waiter_recomputes_when_the_computing_task_is_cancelled() -> None:
    cache: TTLCache[str] = TTLCache(4, math.inf)
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(10)
        return "slow"

    async def fast() -> str:
        return "fast"

    first = asyncio.create_task(cache.get_or_compute("k", slow))
    await started.wait()
    second = asyncio.create_task(cache.get_or_compute("k", fast))
    await asyncio.sleep(0)
    first.cancel()
    assert await asyncio.wait_for(second, 2) == ("fast", False)
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_cancelled_waiter_stays_cancelled_when_the_computation_is_too() -> None:
    cache: TTLCache[str] = TTLCache(4, math.inf)
    started = asyncio.Event()
    computed: list[str] = []

    async def slow(name: str) -> str:
        started.set()
        computed.append(name)
        await asyncio.sleep(10)
        return name

    first = asyncio.create_task(cache.get_or_compute("k", lambda: slow("first")))
    await started.wait()
    second = asyncio.create_task(cache.get_or_compute("k", lambda: slow("second")))
    await asyncio.sleep(0)
    first.cancel()
    second.cancel()  # both at once: the waiter must not start its own computation
    for task in (first, second):
        with pytest.raises(asyncio.CancelledError):
            await task
    assert computed == ["first"]


async def test_zero_size_disables_caching() -> None:
    cache: TTLCache[int] = TTLCache(0, math.inf)
    calls = 0

    async def one() -> int:
        nonlocal calls
        calls += 1
        return 1

    assert await cache.get_or_compute("k", one) == (1, False)
    assert await cache.get_or_compute("k", one) == (1, False)
    assert calls == 2
    assert len(cache) == 0
