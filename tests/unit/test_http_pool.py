"""A judge endpoint's sharded HTTP clients, against a local server on a real socket."""

from __future__ import annotations

import asyncio

import pytest

from evalstream.judges.http_pool import SHARD_SIZE, ShardedClients
from evalstream.judges.waits import StoppableWaits
from tests.support.llm_server import llm_server

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


async def test_concurrency_over_several_shards_is_capped_at_max_connections() -> None:
    limit = 2 * SHARD_SIZE + 3  # three shards of unequal size
    # Long enough that every request is in at once even on a loaded machine (each costs
    # a few ms of CPU here, client and server sharing one loop).
    async with llm_server(delay_s=0.5) as server:
        pool = ShardedClients(server.url, headers={}, params={"v": "1"}, timeout_s=5.0,
                              max_connections=limit)

        async def post() -> int:
            async with pool.client() as client:
                return (await client.post("chat/completions", json=BODY)).status_code

        statuses = await asyncio.gather(*(post() for _ in range(2 * limit)))
        await pool.aclose()
    assert statuses == [200] * (2 * limit)
    assert server.max_concurrent == limit  # reached, never exceeded
    assert {r.path for r in server.posts} == {"/v1/chat/completions?v=1"}


async def test_a_failed_request_gives_its_slot_back() -> None:
    pool = ShardedClients("http://127.0.0.1:1/v1", headers={}, params={}, timeout_s=1.0,
                          max_connections=1)
    with pytest.raises(RuntimeError):
        async with pool.client():
            raise RuntimeError("the request failed")
    async with asyncio.timeout(1.0):  # the only slot is free again
        async with pool.client() as client:
            assert str(client.base_url) == "http://127.0.0.1:1/v1/"
    await pool.aclose()



async def test_a_held_wait_cancelled_after_it_was_handed_the_slot_passes_it_on() -> None:
    """A stop or a revoke cancels a request waiting for a slot (``hold``), possibly after a
    release woke it but before it ran: the slot must go to the next one waiting, not be
    lost (every later request would then wait for a slot that never comes back)."""
    pool = ShardedClients("http://127.0.0.1:1/v1", headers={}, params={}, timeout_s=1.0,
                          max_connections=1)
    waits = StoppableWaits()
    release = asyncio.Event()
    got: list[str] = []

    async def use(name: str) -> None:
        async with pool.client(waits.wait):
            got.append(name)

    async def hold_then_cancel() -> None:
        async with pool.client(waits.wait):
            await release.wait()
        # In the same step as the release, which handed the slot to "woken": it has not
        # run yet, as when a stop lands between the two.
        woken.cancel()

    holder = asyncio.create_task(hold_then_cancel())
    await asyncio.sleep(0)
    woken = asyncio.create_task(use("woken"))
    await asyncio.sleep(0)
    next_one = asyncio.create_task(use("next"))
    async with asyncio.timeout(1.0):
        while len(waits) < 2:
            await asyncio.sleep(0)
        release.set()
        await holder
        await next_one
    with pytest.raises(asyncio.CancelledError):
        await woken
    assert got == ["next"]
    assert len(waits) == 0
    async with asyncio.timeout(1.0):  # the slot is free again
        async with pool.client():
            pass
    await pool.aclose()
