"""Rate limiting (HTTP 429) is waited out, judge-wide, against local servers on real sockets.

A 429 spends none of ``max_retries`` with ``rate_limit_retry: until_deadline`` (the
default): the request is retried, honouring ``Retry-After``, until its ``deadline_s``; only
a rate-limited period past the deadline ends as an error, naming the 429. And one 429 with
``Retry-After`` pauses the whole judge (``resilience.PauseGate``): the other requests hold
off, then one probe goes first, so a server that keeps rate limiting sees far fewer
requests than when every request found out with a 429 of its own.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx
import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.openai_wire import QuotaExhaustedError, classify_response
from evalstream.judges.resilience import PauseGate
from evalstream.judges.waits import WAIT_SCOPE
from evalstream.metrics import Metrics
from tests.support.clock import FakeClock
from tests.support.llm_server import FakeLLM, llm_server


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


def make_judge(server: FakeLLM, metrics: Metrics, **overrides: Any) -> OpenAIJudge:
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.5, "max_retries": 2, "deadline_s": 10.0,
        "cache_size": 0, "max_concurrency": 32}
    settings.update(overrides)
    return OpenAIJudge("llm", OpenAIJudgeConfig(**settings), metrics)


def question(n: int = 0) -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", f"I can't help with that ({n})."),))


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, {"judge": "llm", **labels}) or 0.0


# --- retried until the deadline, not max_retries times -----------------------------------


async def test_a_429_burst_longer_than_max_retries_is_waited_out() -> None:
    """Six 429s in a row with max_retries 2: answered, nothing published as an error (this
    was "HTTP 429 ... (after 3 attempts)")."""
    metrics = Metrics()
    async with llm_server(retry_after="0.05") as server:
        server.fail_next(*["429"] * 6)
        judge = make_judge(server, metrics)
        answer = await judge.judge(question())
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert answer.info.requests == 7
    assert len(server.posts) == 7
    assert sample(metrics, "evalstream_judge_requests_total", outcome="rate_limited") == 6
    assert sample(metrics, "evalstream_judge_requests_total", outcome="error") == 0


async def test_max_retries_mode_counts_429s_like_other_errors() -> None:
    metrics = Metrics()
    async with llm_server(always="429", retry_after="0.01") as server:
        judge = make_judge(server, metrics, rate_limit_retry="max_retries")
        with pytest.raises(JudgeError, match=r"HTTP 429 .*\(after 3 attempts\)") as info:
            await judge.judge(question())
        await judge.aclose()
    assert not isinstance(info.value, JudgeUnavailableError)
    assert info.value.status == 429
    assert len(server.posts) == 3
    assert sample(metrics, "evalstream_judge_requests_total", outcome="error") == 1


async def test_a_429_period_past_the_deadline_is_an_error_naming_the_429() -> None:
    metrics = Metrics()
    async with llm_server(always="429", retry_after="0.1") as server:
        judge = make_judge(server, metrics, deadline_s=1.0, timeout_s=0.5, max_retries=1)
        start = time.monotonic()
        with pytest.raises(JudgeUnavailableError) as info:
            await judge.judge(question())
        took = time.monotonic() - start
        await judge.aclose()
    message = str(info.value)
    assert "no answer within the 1s deadline" in message, message
    assert "HTTP 429" in message, message
    assert "Rate limit reached" in message, message
    assert took >= 0.95  # it kept trying until the deadline, not for max_retries
    # More attempts than max_retries allows, each after the Retry-After.
    assert 3 <= len(server.posts) <= 11
    assert sample(metrics, "evalstream_judge_requests_total", outcome="deadline") == 1
    assert sample(metrics, "evalstream_judge_requests_total", outcome="error") == 0


async def test_other_retryable_errors_keep_max_retries_after_429s() -> None:
    """429s spend no retry; the 5xx after them still meet max_retries (1 here)."""
    metrics = Metrics()
    async with llm_server(retry_after="0.01") as server:
        server.fail_next("429", "429", "429", "500", "500")
        judge = make_judge(server, metrics, max_retries=1, circuit_failures=50)
        with pytest.raises(JudgeError, match=r"HTTP 500 .*\(after 5 attempts\)"):
            await judge.judge(question())
        await judge.aclose()
    assert len(server.posts) == 5


# --- a 429 that is not rate limiting: the account is out of credit ------------------------


async def test_an_insufficient_quota_429_fails_at_once_and_pauses_nobody() -> None:
    """OpenAI's 429 for an account without credit: one request each, an error naming the
    quota and what to do, long before the deadline, and no judge-wide pause (each was
    retried until the 10 s deadline, and a run of them paused every other request too)."""
    metrics = Metrics()
    async with llm_server(always="quota", retry_after="5") as server:
        judge = make_judge(server, metrics, backoff_max_s=5.0, deadline_s=10.0)
        start = time.monotonic()
        for n in range(2):  # two in a row: a run of 429s would pause the judge
            with pytest.raises(QuotaExhaustedError) as info:
                await judge.judge(question(n))
        took = time.monotonic() - start
        paused = judge._sender.pause.paused
        await judge.aclose()
    assert took < 2.0, took
    assert len(server.posts) == 2
    assert not paused
    error = info.value
    assert not isinstance(error, JudgeUnavailableError)
    assert not error.retryable
    assert error.status == 429
    message = str(error)
    assert "insufficient_quota" in message, message
    assert "billing" in message, message
    assert "(after 1 attempt)" in message, message
    assert sample(metrics, "evalstream_judge_rate_limit_paused_seconds_total") == 0
    assert sample(metrics, "evalstream_judge_requests_total", outcome="rate_limited") == 0
    assert sample(metrics, "evalstream_judge_requests_total", outcome="error") == 2


async def test_a_plain_429_next_to_a_quota_one_is_still_waited_out() -> None:
    metrics = Metrics()
    async with llm_server(retry_after="0.05") as server:
        server.fail_next("quota")
        judge = make_judge(server, metrics)
        with pytest.raises(QuotaExhaustedError):
            await judge.judge(question(1))
        server.fail_next("429", "429", "429", "429")  # more than max_retries (2)
        answer = await judge.judge(question(2))
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert len(server.posts) == 1 + 5
    assert sample(metrics, "evalstream_judge_requests_total", outcome="rate_limited") == 4


@pytest.mark.parametrize("error", [
    {"message": "You exceeded your current quota", "type": "insufficient_quota",
     "param": None, "code": "insufficient_quota"},
    # Seen with "code": null: the type alone says it.
    {"message": "You exceeded your current quota", "type": "insufficient_quota",
     "param": None, "code": None},
])
def test_classify_tells_an_insufficient_quota_429_from_rate_limiting(
        error: dict[str, Any]) -> None:
    response = httpx.Response(429, json={"error": error}, headers={"Retry-After": "20"})
    body, classified = classify_response(response, judge="llm", host="h", redact=str)
    assert body is None
    assert isinstance(classified, QuotaExhaustedError)
    assert not classified.retryable
    assert classified.status == 429


@pytest.mark.parametrize("error", [
    {"message": "Rate limit reached for requests", "type": "requests",
     "code": "rate_limit_exceeded"},
    # The match is on code/type, not on message text.
    {"message": "insufficient_quota? no, a rate limit", "type": "tokens", "code": None},
    {},
])
def test_classify_keeps_other_429s_rate_limiting(error: dict[str, Any]) -> None:
    response = httpx.Response(429, json={"error": error} if error else {})
    _, classified = classify_response(response, judge="llm", host="h", redact=str)
    assert classified is not None
    assert not isinstance(classified, QuotaExhaustedError)
    assert classified.retryable


# --- the judge-wide pause ----------------------------------------------------------------


async def rate_limited_window(pause: bool, *, requests: int = 12, window_s: float = 1.0,
                              retry_after: str = "0.2") -> tuple[int, Metrics]:
    """``requests`` concurrent questions while the server rate limits for ``window_s``:
    the requests it received in the window, and the judge's metrics. ``pause=False``
    switches the judge-wide pause off (the baseline: each request on its own)."""
    metrics = Metrics()
    async with llm_server(always="429", retry_after=retry_after) as server:
        judge = make_judge(server, metrics)
        if not pause:
            judge._sender._pause_for = lambda _error: None  # type: ignore[method-assign]
        asks = [asyncio.create_task(judge.judge(question(n))) for n in range(requests)]
        await asyncio.sleep(window_s)
        in_window = len(server.posts)
        server.always = None
        answers = await asyncio.wait_for(asyncio.gather(*asks), 10)
        await judge.aclose()
    assert all(a.p("yes") > 0.8 for a in answers)  # nothing lost either way
    return in_window, metrics


async def test_a_retry_after_pauses_the_whole_judge_and_fewer_requests_are_sent() -> None:
    alone, _ = await rate_limited_window(pause=False)
    paused, metrics = await rate_limited_window(pause=True)
    # Alone, each of the 12 retries every Retry-After: ~12 per 0.2 s. Paused, the first
    # wave of 12, then about one probe per pause. Loose bounds for a loaded machine.
    assert alone >= 36, alone
    assert paused <= 12 + 10, paused
    assert paused * 2 < alone, (paused, alone)
    assert sample(metrics, "evalstream_judge_rate_limit_paused_seconds_total") >= 0.5
    assert sample(metrics, "evalstream_judge_rate_limit_pause_seconds") == 0  # over now


async def test_the_pause_gauge_shows_a_judge_paused_now() -> None:
    metrics = Metrics()
    async with llm_server(retry_after="5") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics, backoff_max_s=2.0)
        ask = asyncio.create_task(judge.judge(question()))
        deadline = time.monotonic() + 5
        while not server.posts and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        # Retry-After 5 s, the pause at most backoff_max_s.
        assert 1.5 < sample(metrics, "evalstream_judge_rate_limit_pause_seconds") <= 2.0
        ask.cancel()
        await asyncio.gather(ask, return_exceptions=True)
        await judge.aclose()


async def test_a_request_held_at_the_pause_past_its_deadline_names_the_429() -> None:
    """It sent nothing ("after 0 request(s)"): its error still says why it waited (it
    said only "no answer within the 1s deadline")."""
    metrics = Metrics()
    async with llm_server(retry_after="5") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics, backoff_max_s=2.0, deadline_s=1.0, timeout_s=0.5)
        first = asyncio.create_task(judge.judge(question(1)))
        while not judge._sender.pause.paused:
            await asyncio.sleep(0.01)
        with pytest.raises(JudgeUnavailableError) as info:
            await judge.judge(question(2))
        await asyncio.gather(first, return_exceptions=True)
        await judge.aclose()
    message = str(info.value)
    assert "after 0 request(s)" in message, message
    assert "HTTP 429" in message, message
    assert "waited at the judge-wide pause" in message, message
    assert len(server.posts) == 1


async def test_a_bogus_huge_retry_after_pauses_the_judge_for_at_most_backoff_max_s() -> None:
    """"Retry-After: 1e9" must not stop the judge for good: the request that got it waits
    until its deadline, the others only backoff_max_s."""
    metrics = Metrics()
    async with llm_server(retry_after="1e9") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics, backoff_max_s=0.3, deadline_s=3.0)
        first = asyncio.create_task(judge.judge(question(1)))
        while not server.posts:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        start = time.monotonic()
        answer = await asyncio.wait_for(judge.judge(question(2)), 3)
        took = time.monotonic() - start
        assert answer.p("yes") > 0.8
        assert took < 1.0, took
        # The pause's probe was answered: the pause is lifted for everyone but the request
        # that was told to come back much later.
        assert not judge._sender.pause.paused
        with pytest.raises(JudgeUnavailableError, match="HTTP 429"):
            await first
        await judge.aclose()


async def test_a_single_429_without_retry_after_pauses_nobody_a_run_of_them_does() -> None:
    metrics = Metrics()
    async with llm_server(retry_after="") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics)
        await judge.judge(question(1))
        assert sample(metrics, "evalstream_judge_rate_limit_paused_seconds_total") == 0
        server.fail_next("429", "429", "429")
        await judge.judge(question(2))
        await judge.aclose()
    assert sample(metrics, "evalstream_judge_rate_limit_paused_seconds_total") > 0
    assert sample(metrics, "evalstream_judge_requests_total", outcome="rate_limited") == 4


# --- PauseGate on its own ----------------------------------------------------------------


def test_hold_keeps_the_longest_pause_and_says_what_it_added() -> None:
    clock = FakeClock(100.0)
    gate = PauseGate(clock=clock)
    assert not gate.paused
    assert gate.remaining() == 0
    assert gate.hold(2.0) == pytest.approx(2.0)
    assert gate.hold(1.0) == 0.0  # shorter than the pause already held
    assert gate.hold(3.0) == pytest.approx(1.0)
    assert gate.hold(math.nan) == 0.0
    assert gate.hold(0.0) == 0.0
    clock.now = 102.5
    assert gate.remaining() == pytest.approx(0.5)
    assert gate.paused


async def test_after_a_pause_one_probe_goes_and_its_outcome_releases_the_rest() -> None:
    gate = PauseGate()
    gate.hold(0.05)
    waiters = [asyncio.create_task(gate.acquire()) for _ in range(5)]
    done, pending = await asyncio.wait(waiters, timeout=1.0,
                                       return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.05)
    assert [t.result() for t in done] == [True]  # the probe, alone
    assert all(not t.done() for t in pending)
    # Rate limited again: a new pause, then a new probe (the first one is done with).
    gate.hold(0.05)
    gate.settle(True, rate_limited=True)
    done2, pending2 = await asyncio.wait(pending, timeout=1.0,
                                         return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.05)
    assert [t.result() for t in done2] == [True]
    # Abandoned (cancelled): another waiter probes.
    gate.abandon(True)
    done3, pending3 = await asyncio.wait(pending2, timeout=1.0,
                                         return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0.01)
    assert [t.result() for t in done3] == [True]
    # Answered: the rest go at once, none as a probe.
    gate.settle(True, rate_limited=False)
    rest = await asyncio.wait_for(asyncio.gather(*pending3), 1.0)
    assert rest == [False, False]
    assert not gate.paused
    assert await gate.acquire() is False


async def test_a_revoke_or_a_stop_cancels_the_requests_held_at_the_pause() -> None:
    """They sent nothing and may wait backoff_max_s: like waits at a spend cap, a revoke
    of their scope (or a stop) cancels them, and refuses those that come later (they
    slowed a revoke and a stop by up to the pause, then sent for a partition given up)."""
    metrics = Metrics()

    class Assignment:
        pass

    revoked, kept = Assignment(), Assignment()
    async with llm_server(retry_after="5") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics, backoff_max_s=5.0, deadline_s=10.0)
        first = asyncio.create_task(judge.judge(question(1)))
        async with asyncio.timeout(5):
            while not judge._sender.pause.paused:
                await asyncio.sleep(0.01)

        async def ask_in(scope: Assignment, n: int) -> None:
            WAIT_SCOPE.set(scope)
            await judge.judge(question(n))

        gone, held = (asyncio.create_task(ask_in(s, n)) for s, n in ((revoked, 2), (kept, 3)))
        async with asyncio.timeout(5):  # both held at the pause
            while len(judge._waits) < 2:
                await asyncio.sleep(0.01)
        judge.stop_waiting({revoked})
        await asyncio.wait([gone], timeout=1)
        assert gone.cancelled()
        late = asyncio.create_task(ask_in(revoked, 4))
        await asyncio.wait([late], timeout=1)
        assert late.cancelled()  # refused at once, not held until the pause ends
        assert not held.done()
        judge.stop_waiting()
        await asyncio.wait([held], timeout=1)
        assert held.cancelled()
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await judge.aclose()
    assert len(server.posts) == 1
