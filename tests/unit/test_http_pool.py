"""A judge endpoint's sharded HTTP clients, against a local server on a real socket."""

from __future__ import annotations

import asyncio

import pytest

from evalstream.judges.http_pool import SHARD_SIZE, ShardedClients
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
