"""The OpenAI judge when its callers are cancelled or its server stalls mid-answer.

Against local servers on real sockets (tests/support/llm_server): an evaluation cancelled
mid-request (a stop's drain timing out, a rebalance) leaves nothing behind that makes
other requests wait or send more than they should.
"""

from __future__ import annotations

import asyncio

import pytest
import structlog

from evalstream.judges.base import Judgement
from tests.support.llm_server import llm_server
from tests.unit.test_judge_openai import make_judge, question


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


async def test_waiters_on_a_cancelled_request_send_it_once_more_not_once_each() -> None:
    # Five evaluations of the same trace wait on the first one's request; that one is
    # cancelled (its partition revoked). One waiter sends the request again and the others
    # wait for it: each sending its own turned a cancellation into a burst of duplicates.
    async with llm_server(delay_s=0.3) as server:
        judge = make_judge(server, cache_size=100)
        first = asyncio.create_task(judge.judge(question()))
        while not server.posts:
            await asyncio.sleep(0.01)
        waiters = [asyncio.create_task(judge.judge(question())) for _ in range(5)]
        await asyncio.sleep(0.05)
        first.cancel()
        answers = await asyncio.wait_for(asyncio.gather(*waiters), 5)
        await judge.aclose()
    assert all(isinstance(a, Judgement) for a in answers)
    assert len(server.posts) == 2
    assert sorted(a.info.cached for a in answers) == [False, True, True, True, True]
