"""The OpenAI judge when its callers are cancelled or its server stalls mid-answer.

Against local servers on real sockets (tests/support/llm_server): an evaluation cancelled
mid-request (a stop's drain timing out, a rebalance) leaves nothing behind that makes
other requests wait or send more than they should.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import structlog

from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.judges.base import Judgement
from evalstream.judges.resilience import CircuitState
from tests.support.llm_server import FakeLLM, llm_server, serving
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


class _Trickle(FakeLLM):
    """Answers 200 at once, then sends its body a byte at a time, each well within the
    client's read timeout: a stuck proxy or an overloaded server."""

    async def _respond(self, writer: asyncio.StreamWriter, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        data = b'{"choices": []}' + b" " * 200
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(data))
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)
        return True


async def test_a_body_that_trickles_in_is_timed_out_retried_and_opens_the_circuit() -> None:
    # httpx's timeout is per read: a body that keeps coming, slowly, never trips it. One
    # attempt then took the whole deadline, with no retry, an error naming no cause, and
    # the circuit never opened (a cancelled attempt is no failure), so every evaluation
    # waited out its deadline against a broken backend.
    async with serving(_Trickle()) as server:
        judge = make_judge(server, timeout_s=0.5, deadline_s=5.0, max_retries=1,
                           circuit_failures=2)
        started = time.perf_counter()
        with pytest.raises(JudgeError) as caught:
            await judge.judge(question())
        took = time.perf_counter() - started
        state = judge.circuit_state
        await judge.aclose()
    assert not isinstance(caught.value, JudgeUnavailableError)
    assert "Timeout after 0.5s" in str(caught.value)
    assert len(server.posts) == 2  # retried once
    assert took < 2.0
    assert state is CircuitState.OPEN
