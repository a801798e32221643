"""The bounded async memo behind the role caches: joins, eviction, failures, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from evalstream.evaluators.common import AsyncMemo


async def test_joins_in_flight_and_evicts_oldest() -> None:
    memo: AsyncMemo[int] = AsyncMemo(2)
    calls = 0

    async def compute() -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return calls

    assert await asyncio.gather(memo.get("a", compute), memo.get("a", compute)) == [1, 1]
    await memo.get("b", compute)
    await memo.get("c", compute)  # evicts "a"
    assert len(memo) == 2
    assert await memo.get("a", compute) == 4
    assert memo.misses == 4


async def test_failures_are_not_remembered() -> None:
    memo: AsyncMemo[int] = AsyncMemo(4)

    async def boom() -> int:
        raise ValueError("judge down")

    async def ok() -> int:
        return 7

    with pytest.raises(ValueError, match="judge down"):
        await memo.get("k", boom)
    assert await memo.get("k", ok) == 7


async def test_waiter_recomputes_when_the_computing_task_is_cancelled() -> None:
    memo: AsyncMemo[str] = AsyncMemo(4)
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await asyncio.sleep(10)
        return "slow"

    async def fast() -> str:
        return "fast"

    first = asyncio.create_task(memo.get("k", slow))
    await started.wait()
    second = asyncio.create_task(memo.get("k", fast))
    await asyncio.sleep(0)
    first.cancel()
    assert await asyncio.wait_for(second, 2) == "fast"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_zero_size_disables_caching() -> None:
    memo: AsyncMemo[int] = AsyncMemo(0)

    async def one() -> int:
        return 1

    await memo.get("k", one)
    await memo.get("k", one)
    assert memo.misses == 2
    assert len(memo) == 0
