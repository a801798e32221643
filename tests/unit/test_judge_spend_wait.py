"""``on_spend_cap: wait``: a capped judge waits for its window to have room, never errors.

The judge tests talk to a local OpenAI-compatible server on a real socket
(tests/support/llm_server). The spend window runs on an injected clock, and the wait sleeps
through an injected ``sleep`` that moves that clock, so an hour-long window passes at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.spend import SpendCap, SpendCapWait, SpendWindow
from evalstream.judges.waits import WAIT_SCOPE
from evalstream.metrics import Metrics
from tests.support.clock import FakeClock
from tests.support.llm_server import FakeLLM, llm_server


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()  # see test_judge_openai.py


class FakeSleep:
    """Sleeps by moving ``clock`` (after a real ``pause``), and records what was asked."""

    def __init__(self, clock: FakeClock, pause: float = 0.0) -> None:
        self.clock = clock
        self.pause = pause
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(self.pause)
        self.clock.now += seconds


def question(output: str) -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", output),))


def waiting_judge(server: FakeLLM, metrics: Metrics, clock: FakeClock, sleep: Any,
                  **overrides: Any) -> OpenAIJudge:
    # The fake server reports 1 completion token per answer: at $1000 per 1k output tokens
    # each answered request costs exactly $1.
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_retries": 2, "deadline_s": 10.0,
        "cache_size": 0, "price_output_per_1k": 1000.0, "spend_cap_usd": 2.0,
        "spend_cap_window_s": 3600.0, "on_spend_cap": "wait"}
    settings.update(overrides)
    return OpenAIJudge("gpt", OpenAIJudgeConfig(**settings), metrics, clock=clock, sleep=sleep)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


# --- SpendCap -----------------------------------------------------------------------------


async def test_a_waiting_cap_asks_to_wait_and_waits_until_the_oldest_spend_leaves() -> None:
    clock = FakeClock(1_000.0)
    sleep = FakeSleep(clock)
    refused: list[int] = []
    cap = SpendCap("gpt", 2.0, SpendWindow(600, buckets=60, clock=clock),
                   lambda: refused.append(1), wait=True, sleep=sleep)
    cap.add(1.0)  # bucket [1000, 1010): leaves at 1600
    clock.now = 1_100.0
    cap.add(1.5)  # bucket [1100, 1110): leaves at 1700
    with pytest.raises(SpendCapWait):
        cap.check()
    assert refused == []  # a wait is counted when it starts, not per check
    clock.now = 1_200.0
    await cap.wait_for_room()
    # One sleep, exactly to when the first bucket leaves; then $1.5 < $2: room.
    assert sleep.asked == [pytest.approx(400.0)]
    assert clock.now == pytest.approx(1_600.0)
    assert cap.window.total() == pytest.approx(1.5)
    assert refused == [1]
    assert cap.waiting == 0
    cap.check()  # room: no exception


async def test_a_wait_sleeps_again_while_one_bucket_leaving_is_not_enough() -> None:
    clock = FakeClock(0.0)
    sleep = FakeSleep(clock)
    cap = SpendCap("gpt", 1.0, SpendWindow(60, buckets=6, clock=clock), lambda: None,
                   wait=True, sleep=sleep)
    cap.add(1.0)  # bucket [0, 10): leaves at 60
    clock.now = 20.0
    cap.add(1.0)  # bucket [20, 30): leaves at 80
    await cap.wait_for_room()
    assert sleep.asked == [pytest.approx(40.0), pytest.approx(20.0)]
    assert cap.window.total() == 0.0


async def test_stop_waiting_cancels_the_waiters_and_any_later_ones() -> None:
    clock = FakeClock(0.0)
    cap = SpendCap("gpt", 1.0, SpendWindow(3600, clock=clock), lambda: None, wait=True)
    cap.add(5.0)
    waiter = asyncio.create_task(cap.wait_for_room())  # real sleep of ~an hour
    async with asyncio.timeout(5):
        while cap.waiting == 0:
            await asyncio.sleep(0.001)
    cap.waits.stop()
    async with asyncio.timeout(1):
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert waiter.cancelled()
    assert cap.waiting == 0
    with pytest.raises(asyncio.CancelledError):
        await cap.wait_for_room()


async def test_stop_waiting_for_some_scopes_cancels_only_their_waits() -> None:
    # A revoke gives up some partitions: only the waits of evaluations of those end, and
    # later waits still wait (the worker is not stopping).
    cap = SpendCap("gpt", 1.0, SpendWindow(3600, clock=FakeClock(0.0)), lambda: None,
                   wait=True)
    cap.add(5.0)

    async def wait_in(scope: str) -> None:
        WAIT_SCOPE.set(scope)
        await cap.wait_for_room()

    kept, revoked = (asyncio.create_task(wait_in(s)) for s in ("p1", "p0"))
    async with asyncio.timeout(5):
        while cap.waiting < 2:
            await asyncio.sleep(0.001)
    cap.waits.stop({"p0"})
    # Not ``pytest.raises(CancelledError)`` under ``asyncio.timeout``: the timeout's own
    # cancellation would satisfy it.
    await asyncio.wait([revoked], timeout=1)
    assert revoked.cancelled()
    await asyncio.sleep(0.01)
    assert not kept.done()
    later = asyncio.create_task(wait_in("p0"))
    await asyncio.sleep(0.01)
    assert not later.done()
    assert cap.waiting == 2
    cap.waits.stop()
    await asyncio.gather(kept, later, return_exceptions=True)
    assert kept.cancelled()
    assert later.cancelled()


async def test_a_wait_that_starts_in_a_scope_already_given_up_is_refused_at_once() -> None:
    # A revoked partition's evaluation that reaches the cap after the revoke must not wait
    # the window out (holding its slot) for work now someone else's. A scope names one
    # assignment: a new one (the partition assigned again) waits as before.
    cap = SpendCap("gpt", 1.0, SpendWindow(3600, clock=FakeClock(0.0)), lambda: None,
                   wait=True)
    cap.add(5.0)

    class Assignment:
        pass

    revoked, current = Assignment(), Assignment()

    async def wait_in(scope: Assignment) -> None:
        WAIT_SCOPE.set(scope)
        await cap.wait_for_room()

    cap.waits.stop({revoked})
    late = asyncio.create_task(wait_in(revoked))
    await asyncio.wait([late], timeout=1)
    assert late.cancelled()  # refused: it never waited
    assert cap.waiting == 0
    kept = asyncio.create_task(wait_in(current))
    await asyncio.sleep(0.01)
    assert not kept.done()
    assert cap.waiting == 1
    cap.waits.stop()
    await asyncio.gather(kept, return_exceptions=True)
    assert kept.cancelled()


# --- the OpenAI judge -------------------------------------------------------------------


async def test_a_capped_request_waits_for_room_then_is_sent_never_an_error() -> None:
    metrics, clock = Metrics(), FakeClock(1_000.0)
    sleep = FakeSleep(clock)
    async with llm_server() as server:
        judge = waiting_judge(server, metrics, clock, sleep)
        try:
            await judge.judge(question("a"))
            await judge.judge(question("b"))
            assert len(server.posts) == 2
            third = await judge.judge(question("c"))  # capped: waits, then is sent
        finally:
            await judge.aclose()
    assert len(server.posts) == 3
    assert third.info.cost_usd == pytest.approx(1.0)
    # 60 buckets of 60 s: the answers' bucket [960, 1020) leaves at 76 * 60 = 4560 s.
    assert sleep.asked == [pytest.approx(3560.0)]
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt",
                  outcome="capped") == 1
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt", outcome="ok") == 3
    assert sample(metrics, "evalstream_judge_spend_cap_waiting_requests", judge="gpt") == 0


async def test_the_wait_does_not_count_against_the_deadline() -> None:
    # Each wait takes 0.5 s of real time, more than the whole deadline (0.3 s): had the
    # deadline run during it, the call would end as "no answer within the deadline".
    metrics, clock = Metrics(), FakeClock(1_000.0)
    sleep = FakeSleep(clock, pause=0.5)
    async with llm_server() as server:
        judge = waiting_judge(server, metrics, clock, sleep, timeout_s=0.3, deadline_s=0.3,
                              spend_cap_usd=1.0)
        try:
            await judge.judge(question("a"))
            waited = await judge.judge(question("b"))
        finally:
            await judge.aclose()
    assert len(server.posts) == 2
    assert len(sleep.asked) == 1
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt",
                  outcome="deadline") == 0
    assert waited.info.latency_ms < 400  # the 0.5 s wait is not the judge's latency


async def test_the_waiting_gauge_shows_requests_held_at_the_cap() -> None:
    metrics, clock = Metrics(), FakeClock(1_000.0)
    gate = asyncio.Event()

    async def held(seconds: float) -> None:
        await gate.wait()
        clock.now += seconds

    async with llm_server() as server:
        judge = waiting_judge(server, metrics, clock, held, spend_cap_usd=1.0)
        try:
            await judge.judge(question("a"))
            calls = [asyncio.create_task(judge.judge(question(str(i)))) for i in range(3)]
            async with asyncio.timeout(5):
                while sample(metrics, "evalstream_judge_spend_cap_waiting_requests",
                             judge="gpt") < 3:
                    await asyncio.sleep(0.005)
            assert len(server.posts) == 1
            gate.set()
            await asyncio.wait_for(asyncio.gather(*calls), 10)
        finally:
            await judge.aclose()
    assert len(server.posts) == 4
    assert sample(metrics, "evalstream_judge_spend_cap_waiting_requests", judge="gpt") == 0


async def test_a_cap_reached_while_queued_for_a_connection_waits_and_all_are_answered() -> None:
    # 8 requests, 3 connections, a $1 cap: each time the window frees, the requests holding
    # a connection go out (the documented overshoot); the ones queued behind them find the
    # cap reached again and wait once more. None is refused or fails.
    metrics, clock = Metrics(), FakeClock(1_000.0)
    sleep = FakeSleep(clock)
    async with llm_server(delay_s=0.02) as server:
        judge = waiting_judge(server, metrics, clock, sleep, spend_cap_usd=1.0,
                              max_concurrency=3)
        try:
            answers = await asyncio.wait_for(
                asyncio.gather(*(judge.judge(question(str(i))) for i in range(8))), 10)
        finally:
            await judge.aclose()
    assert len(answers) == 8
    assert len(server.posts) == 8
    assert server.max_concurrent <= 3
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt", outcome="ok") == 8
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt",
                  outcome="error") == 0


async def test_a_stop_cancels_a_request_waiting_at_the_cap() -> None:
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        # The real asyncio.sleep: the wait would last the window's hour.
        judge = waiting_judge(server, metrics, clock, asyncio.sleep, spend_cap_usd=1.0)
        try:
            await judge.judge(question("a"))
            call = asyncio.create_task(judge.judge(question("b")))
            async with asyncio.timeout(5):
                while sample(metrics, "evalstream_judge_spend_cap_waiting_requests",
                             judge="gpt") < 1:
                    await asyncio.sleep(0.005)
            judge.stop_waiting()
            async with asyncio.timeout(1):
                with pytest.raises(asyncio.CancelledError):
                    await call
        finally:
            await judge.aclose()
    assert len(server.posts) == 1
