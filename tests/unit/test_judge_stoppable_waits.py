"""A stop or a revoke cancels a request waiting before it is sent, wherever it waits.

The waits at a spend cap and at the rate-limit pause are covered by
``test_judge_spend_wait.py`` and ``test_judge_rate_limit.py``. Here: a token bucket
(``requests_per_s``), an open circuit breaker, a connection slot (``max_concurrency``) and
the backoff before a retry, each of which was bounded by the request's deadline only, so a
revoke or a drain waited for it. The judge
talks to a local server on a real socket (tests/support/llm_server).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.waits import WAIT_SCOPE
from evalstream.metrics import Metrics
from tests.support.llm_server import FakeLLM, llm_server


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


class Assignment:
    """A wait scope, as the worker sets it: one partition assignment."""


def make_judge(server: FakeLLM, **overrides: Any) -> OpenAIJudge:
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.1, "max_retries": 2, "deadline_s": 20.0,
        "cache_size": 0}
    settings.update(overrides)
    return OpenAIJudge("llm", OpenAIJudgeConfig(**settings), Metrics())


def question(n: int) -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", f"I can't help with that ({n})."),))


def ask_in(judge: OpenAIJudge, scope: Assignment, n: int) -> asyncio.Task[Any]:
    async def ask() -> Any:
        WAIT_SCOPE.set(scope)
        return await judge.judge(question(n))

    return asyncio.create_task(ask())


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


async def cancelled_within(task: asyncio.Task[Any], seconds: float) -> float:
    """How long ``task`` took to end; it must end cancelled within ``seconds``."""
    start = time.monotonic()
    await asyncio.wait([task], timeout=seconds)
    assert task.cancelled(), task
    return time.monotonic() - start


async def test_a_revoke_cancels_only_its_requests_waiting_at_a_token_bucket() -> None:
    # One request per 20 s: the first goes, the others wait at the bucket for up to their
    # deadline (20 s).
    async with llm_server() as server:
        judge = make_judge(server, requests_per_s=0.05)
        revoked, kept = Assignment(), Assignment()
        await judge.judge(question(0))
        gone, held = ask_in(judge, revoked, 1), ask_in(judge, kept, 2)
        await until(lambda: len(judge._waits) == 2)
        judge.stop_waiting({revoked})
        assert await cancelled_within(gone, 1.0) < 1.0
        late = ask_in(judge, revoked, 3)  # refused at once: its scope is given up
        assert await cancelled_within(late, 1.0) < 1.0
        assert not held.done()
        judge.stop_waiting()  # the worker stops
        assert await cancelled_within(held, 1.0) < 1.0
        await judge.aclose()
    assert len(server.posts) == 1
    assert len(judge._waits) == 0


async def test_a_stop_cancels_a_request_waiting_at_an_open_circuit() -> None:
    async with llm_server(always="500") as server:
        judge = make_judge(server, circuit_failures=1, circuit_reset_s=60.0, max_retries=0)
        with pytest.raises(JudgeError, match="HTTP 500"):
            await judge.judge(question(0))  # opens the circuit for 60 s
        waiting = ask_in(judge, Assignment(), 1)
        await until(lambda: len(judge._waits) == 1)
        judge.stop_waiting()
        assert await cancelled_within(waiting, 1.0) < 1.0
        await judge.aclose()
    assert len(server.posts) == 1


async def test_a_revoke_cancels_a_request_in_its_backoff_before_a_retry() -> None:
    # A Retry-After of 30 s is honoured above backoff_max_s: the request sleeps 30 s before
    # its retry (the judge-wide pause it sets lasts only backoff_max_s).
    async with llm_server(retry_after="30") as server:
        server.fail_next("429")
        judge = make_judge(server, deadline_s=60.0)
        scope = Assignment()
        backing_off = ask_in(judge, scope, 1)
        await until(lambda: len(server.posts) == 1 and len(judge._waits) == 1)
        judge.stop_waiting({scope})
        assert await cancelled_within(backing_off, 1.0) < 1.0
        # The pause it set is lifted once over (its probe abandoned): another assignment's
        # request is answered.
        answer = await asyncio.wait_for(judge.judge(question(2)), 5)
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert len(server.posts) == 2


async def test_a_revoke_cancels_only_its_requests_waiting_for_a_connection_slot() -> None:
    # One connection slot (max_concurrency 1) and answers that take 1 s: the first request
    # holds the slot, the others queue for it, each for up to its deadline, nothing of
    # them sent.
    async with llm_server(delay_s=1.0) as server:
        judge = make_judge(server, max_concurrency=1)
        revoked, kept = Assignment(), Assignment()
        first = ask_in(judge, kept, 0)
        await until(lambda: server.concurrent == 1)
        gone, held = ask_in(judge, revoked, 1), ask_in(judge, kept, 2)
        await until(lambda: len(judge._waits) == 2)
        judge.stop_waiting({revoked})
        # Before the answer to the request on the wire frees the slot.
        assert await cancelled_within(gone, 0.5) < 0.5
        assert not held.done()
        # The kept assignment's requests go on: the slot passes to the one waiting.
        answers = await asyncio.wait_for(asyncio.gather(first, held), 5)
        await judge.aclose()
    assert all(answer.p("yes") > 0.8 for answer in answers)
    assert len(server.posts) == 2
    assert len(judge._waits) == 0


@pytest.mark.parametrize("wait", ["bucket", "breaker", "slot"])
async def test_after_a_stop_a_request_that_need_not_wait_still_goes(wait: str) -> None:
    """A stop's drain finishes the requests in flight: only those that would wait are
    cancelled, not every request passing the bucket, the breaker or a free slot."""
    async with llm_server() as server:
        judge = make_judge(server, requests_per_s=100.0 if wait == "bucket" else None,
                           circuit_failures=1, max_concurrency=1)
        judge.stop_waiting()
        answer = await asyncio.wait_for(judge.judge(question(1)), 5)
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert len(server.posts) == 1
