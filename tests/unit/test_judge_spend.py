"""Judge spend caps: the rolling window, and an OpenAI judge refusing to send past its cap.

The judge tests talk to a local OpenAI-compatible server on a real socket
(tests/support/llm_server) and assert at the server that nothing is sent once capped.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from prometheus_client import generate_latest

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeSpendCapError
from evalstream.judges.base import JudgeRequest, judge_info_of
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.spend import SpendWindow
from evalstream.metrics import Metrics
from tests.support.clock import FakeClock
from tests.support.llm_server import FakeLLM, llm_server


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()  # see test_judge_openai.py


# --- SpendWindow ----------------------------------------------------------------------


def test_window_sums_spend_until_it_rolls_out() -> None:
    clock = FakeClock(0.0)
    window = SpendWindow(600, buckets=60, clock=clock)  # 10 s buckets
    window.add(1.0)
    clock.now = 305.0
    window.add(2.0)
    assert window.total() == pytest.approx(3.0)
    clock.now = 599.0
    assert window.total() == pytest.approx(3.0)
    clock.now = 600.0  # the first bucket [0, 10) has left; the second has not
    assert window.total() == pytest.approx(2.0)
    clock.now = 300.0 + 600.0 + 10.0
    assert window.total() == 0.0


def test_release_time_is_when_the_oldest_bucket_leaves() -> None:
    clock = FakeClock(0.0)
    window = SpendWindow(600, buckets=60, clock=clock)
    assert window.seconds_until_release() == 0.0
    clock.now = 12.0  # bucket [10, 20): leaves the window at 610
    window.add(1.0)
    clock.now = 100.0
    assert window.seconds_until_release() == pytest.approx(510.0)
    clock.now = 610.0
    assert window.total() == 0.0
    assert window.seconds_until_release() == 0.0


def test_memory_is_bounded_by_the_bucket_count() -> None:
    clock = FakeClock(0.0)
    window = SpendWindow(60, buckets=6, clock=clock)
    for step in range(10_000):  # ~2 hours of spend every 0.7 s: 700 buckets' worth
        clock.now = step * 0.7
        window.add(0.01)
        assert len(window) <= 6
    # Only the 6 newest 10 s buckets count: [6940, 7000), the clock being at 6999.3.
    assert window.total() == pytest.approx(0.01 * sum(
        1 for step in range(10_000) if step * 0.7 >= 6940))


@pytest.mark.parametrize("usd", [0.0, -1.0, float("nan")])
def test_nothing_and_nonsense_is_not_counted(usd: float) -> None:
    window = SpendWindow(60)
    window.add(usd)
    assert window.total() == 0.0
    assert len(window) == 0


# --- the OpenAI judge ---------------------------------------------------------------


def question(output: str) -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", output),))


def capped_judge(server: FakeLLM, metrics: Metrics, clock: FakeClock,
                 **overrides: Any) -> OpenAIJudge:
    # The fake server reports 1 completion token per answer: at $1000 per 1k output tokens
    # each answered request costs exactly $1, whatever the prompt's size.
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_retries": 2, "deadline_s": 10.0,
        "cache_size": 100, "price_output_per_1k": 1000.0, "spend_cap_usd": 2.0,
        "spend_cap_window_s": 3600.0}
    settings.update(overrides)
    return OpenAIJudge("gpt", OpenAIJudgeConfig(**settings), metrics, clock=clock)


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_once_capped_nothing_is_sent_until_spend_leaves_the_window() -> None:
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        judge = capped_judge(server, metrics, clock)
        try:
            first = await judge.judge(question("a"))
            await judge.judge(question("b"))
            assert first.info.cost_usd == pytest.approx(1.0)
            with pytest.raises(JudgeSpendCapError) as info:
                await judge.judge(question("c"))
            assert len(server.posts) == 2  # the refused request never reached the server
            # Cached answers cost nothing: they still come.
            again = await judge.judge(question("a"))
            assert again.info.cached
            assert again.p("yes") == first.p("yes")
            assert len(server.posts) == 2
            assert sample(metrics, "evalstream_judge_spend_window_usd",
                          judge="gpt") == pytest.approx(2.0)
            clock.now += 3600.0 + 60.0  # both answers have left the window
            assert sample(metrics, "evalstream_judge_spend_window_usd", judge="gpt") == 0.0
            await judge.judge(question("c"))
            assert len(server.posts) == 3
        finally:
            await judge.aclose()
    error = info.value
    assert isinstance(error, JudgeError)
    assert not error.retryable
    message = str(error)
    assert "'gpt'" in message
    assert "$2" in message
    assert "3600s" in message
    # 60 buckets of 60 s: the answers' bucket [960, 1020) leaves at 76 * 60 = 4560 s.
    assert "leaving the window in 3560s" in message
    assert "no request sent" in message
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt",
                  outcome="capped") == 1
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt", outcome="ok") == 3


async def test_the_cost_counted_is_the_reported_usage_at_the_configured_prices() -> None:
    # The cap counts what the metric counts: tokens the server reported, priced per 1k. A
    # long prompt costs more than a short one, and the window holds the exact sum.
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        judge = capped_judge(server, metrics, clock, price_input_per_1k=0.3,
                             price_output_per_1k=0.6, spend_cap_usd=1.0)
        try:
            short = await judge.judge(question("no"))
            long = await judge.judge(question("word " * 2000))
        finally:
            await judge.aclose()
    assert long.info.tokens_in > 10 * short.info.tokens_in
    for answer in (short, long):
        assert answer.info.cost_usd == pytest.approx(
            (answer.info.tokens_in * 0.3 + answer.info.tokens_out * 0.6) / 1000)
    spent = short.info.cost_usd + long.info.cost_usd
    assert sample(metrics, "evalstream_judge_spend_window_usd",
                  judge="gpt") == pytest.approx(spent)
    assert sample(metrics, "evalstream_judge_cost_usd_total", judge="gpt") == pytest.approx(spent)


async def test_a_failed_request_costs_nothing_and_a_capped_retry_is_not_sent() -> None:
    # A 500 reports no usage: it costs nothing. The cap is checked before every attempt,
    # so once it is reached no retry of an earlier failure goes out either.
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        judge = capped_judge(server, metrics, clock, spend_cap_usd=1.0, cache_size=0)
        try:
            server.fail_next("500")
            await judge.judge(question("a"))  # 500, then a retry that costs $1
            assert len(server.posts) == 2
            assert sample(metrics, "evalstream_judge_spend_window_usd",
                          judge="gpt") == pytest.approx(1.0)
            server.fail_next("500")
            with pytest.raises(JudgeSpendCapError):
                await judge.judge(question("b"))
            assert len(server.posts) == 2
        finally:
            await judge.aclose()


async def test_in_flight_requests_overshoot_by_at_most_their_own_cost() -> None:
    # Requests that passed the check before the cap was reached still complete and count
    # (the documented overshoot); none starts once the window is at the cap.
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server(delay_s=0.05) as server:
        judge = capped_judge(server, metrics, clock, spend_cap_usd=1.0, cache_size=0,
                             max_concurrency=3)
        try:
            outcomes = await asyncio.gather(*(judge.judge(question(str(i))) for i in range(8)),
                                            return_exceptions=True)
        finally:
            await judge.aclose()
    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, JudgeSpendCapError)]
    assert len(answered) + len(refused) == 8
    # Only the requests holding one of the 3 connection slots when the first answer came
    # could overshoot; the ones queued for a slot are checked again and refused.
    assert 1 <= len(server.posts) == len(answered) <= 3
    assert sample(metrics, "evalstream_judge_spend_window_usd",
                  judge="gpt") == pytest.approx(len(answered))


async def test_without_a_cap_spend_is_still_shown_and_never_refused() -> None:
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        judge = capped_judge(server, metrics, clock, spend_cap_usd=None, cache_size=0)
        try:
            for i in range(4):
                await judge.judge(question(str(i)))
        finally:
            await judge.aclose()
    assert len(server.posts) == 4
    assert sample(metrics, "evalstream_judge_spend_window_usd",
                  judge="gpt") == pytest.approx(4.0)
    assert sample(metrics, "evalstream_judge_requests_total", judge="gpt",
                  outcome="capped") == 0


async def test_cap_metrics_exist_from_start_up_and_are_read_at_scrape_time() -> None:
    # The "capped" series exists at 0 before any refusal, so the alert's increase() sees the
    # first one; the spend gauge is computed when scraped, so it falls as spend ages out
    # even while no request is made.
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server() as server:
        judge = capped_judge(server, metrics, clock, spend_cap_usd=5.0, cache_size=0)
        try:
            scraped = generate_latest(metrics.registry).decode()
            assert 'evalstream_judge_requests_total{judge="gpt",outcome="capped"} 0.0' in scraped
            assert 'evalstream_judge_spend_window_usd{judge="gpt"} 0.0' in scraped
            assert "capped ones were refused unsent" in scraped  # help text names the outcome
            await judge.judge(question("a"))
        finally:
            await judge.aclose()
    scraped = generate_latest(metrics.registry).decode()
    assert 'evalstream_judge_spend_window_usd{judge="gpt"} 1.0' in scraped
    clock.now += 3600.0 + 60.0
    scraped = generate_latest(metrics.registry).decode()
    assert 'evalstream_judge_spend_window_usd{judge="gpt"} 0.0' in scraped
    escalations = next(m for m in metrics.registry.collect()
                       if m.name == "evalstream_judge_escalations")
    assert "capped" in escalations.documentation


async def test_a_request_refused_once_it_has_a_connection_slot_counts_no_request() -> None:
    # The cap is checked again once a request holds its connection slot: refused there,
    # nothing was sent, and its result must not say it sent one ("no request sent" with
    # requests: 1 was counted as a request in every per-result tally).
    metrics, clock = Metrics(), FakeClock(1_000.0)
    async with llm_server(delay_s=0.1) as server:
        judge = capped_judge(server, metrics, clock, spend_cap_usd=1.0, cache_size=0,
                             max_concurrency=1)
        try:
            outcomes = await asyncio.gather(judge.judge(question("a")),
                                            judge.judge(question("b")),
                                            return_exceptions=True)
        finally:
            await judge.aclose()
    refused = [o for o in outcomes if isinstance(o, JudgeSpendCapError)]
    assert len(refused) == 1
    assert len(server.posts) == 1
    info = judge_info_of(refused[0])
    assert info is not None
    assert info.requests == 0
