"""The OpenAI-compatible judge against local servers on real sockets (tests/support/llm_server).

Each provider's documented response shape, and each way a server misbehaves, ends as
designed: an answer, a bounded retry, the circuit opening, a fallback, or a JudgeError.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.judges.base import GenerateRequest, JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.resilience import CircuitState
from evalstream.metrics import Metrics
from tests.support.llm_server import STYLES, FakeLLM, llm_server

API = {"openai_chat": "chat", "vllm_chat": "chat", "llamacpp_chat": "chat",
       "openai_completions": "completions", "vllm_completions": "completions",
       "llamacpp_native": "llamacpp", "llamacpp_native_old": "llamacpp"}


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    # Another test (the CLI's) may have configured structlog to print to a pytest capture
    # stream that is closed by now; log through structlog's defaults instead.
    structlog.reset_defaults()


def make_judge(server: FakeLLM, metrics: Metrics | None = None, **overrides: Any) -> OpenAIJudge:
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "api": API[server.style],
        "timeout_s": 2.0, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_retries": 3,
        "deadline_s": 10.0, "cache_size": 0}
    settings.update(overrides)
    return OpenAIJudge("llm", OpenAIJudgeConfig(**settings), metrics or Metrics())


def question(output: str = "I can't help with that.", **kwargs: Any) -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", output),), **kwargs)


def counter(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.parametrize("style", STYLES)
async def test_reads_first_token_distribution_of_each_provider(style: str) -> None:
    metrics = Metrics()
    async with llm_server(style) as server:
        judge = make_judge(server, metrics, price_input_per_1k=0.5, price_output_per_1k=1.5)
        answer = await judge.judge(question())
        await judge.aclose()
    # "Yes" 0.7 + " yes" 0.1 fold together; "No" 0.15; " maybe" is not an option.
    assert answer.p("yes") == pytest.approx(0.8 / 0.95)
    assert answer.p("no") == pytest.approx(0.15 / 0.95)
    sent = server.posts[0]
    if API[style] == "chat":
        assert sent.path == "/v1/chat/completions"
        assert sent.body["logprobs"] is True
        assert sent.body["top_logprobs"] == 10
        assert sent.body["max_tokens"] == 1
    elif API[style] == "completions":
        assert sent.path == "/v1/completions"
        assert sent.body["logprobs"] == 10
        assert sent.body["max_tokens"] == 1
    else:
        assert sent.path == "/completion"
        assert sent.body["n_probs"] == 10
        assert sent.body["n_predict"] == 1
    assert sent.body["temperature"] == 0
    assert answer.info.tokens_in > 0
    assert answer.info.tokens_out == 1
    assert answer.info.cost_usd == pytest.approx(
        (answer.info.tokens_in * 0.5 + 1.5) / 1000)
    assert counter(metrics, "evalstream_judge_cost_usd_total", judge="llm") == pytest.approx(
        answer.info.cost_usd)
    assert counter(metrics, "evalstream_judge_requests_total", judge="llm", outcome="ok") == 1
    assert answer.info.probabilities_from == "logprobs"
    assert counter(metrics, "evalstream_judge_answers_total", judge="llm",
                   source="logprobs") == 1
    assert counter(metrics, "evalstream_judge_answers_total", judge="llm", source="json") == 0


async def test_429_retry_after_is_honoured_then_succeeds() -> None:
    metrics = Metrics()
    async with llm_server(retry_after="0.3") as server:
        server.fail_next("429")
        judge = make_judge(server, metrics)
        start = time.monotonic()
        answer = await judge.judge(question())
        elapsed = time.monotonic() - start
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert len(server.posts) == 2
    assert server.posts[1].at - server.posts[0].at >= 0.3  # waited at least Retry-After
    assert elapsed >= 0.3
    assert counter(metrics, "evalstream_judge_requests_total", judge="llm",
                   outcome="rate_limited") == 1


@pytest.mark.parametrize("fault", ["500", "timeout", "reset", "nonjson"])
async def test_transient_faults_are_retried(fault: str) -> None:
    metrics = Metrics()
    async with llm_server(timeout_delay_s=3.0) as server:
        server.fail_next(fault, fault)
        judge = make_judge(server, metrics, timeout_s=0.3, deadline_s=5.0)
        answer = await judge.judge(question())
        await judge.aclose()
    assert answer.p("yes") > 0.8
    assert answer.info.requests == 3
    assert len(server.posts) == 3
    assert counter(metrics, "evalstream_judge_requests_total", judge="llm", outcome="retry") == 2


@pytest.mark.parametrize("fault", ["500", "reset", "nonjson"])
async def test_retries_are_bounded(fault: str) -> None:
    metrics = Metrics()
    async with llm_server(always=fault) as server:
        judge = make_judge(server, metrics, max_retries=2, circuit_failures=50)
        with pytest.raises(JudgeError, match="after 3 attempts") as info:
            await judge.judge(question())
        await judge.aclose()
    assert info.value.retryable
    assert len(server.posts) == 3
    assert counter(metrics, "evalstream_judge_requests_total", judge="llm", outcome="error") == 1


@pytest.mark.parametrize(("fault", "status", "hint", "mode"), [
    ("401", 401, "authentication failed", "auto"), ("400", 400, "rejected", "always")])
async def test_client_errors_fail_fast(fault: str, status: int, hint: str, mode: str) -> None:
    async with llm_server(always=fault) as server:
        judge = make_judge(server, max_retries=5, logprobs=mode)
        with pytest.raises(JudgeError, match=hint) as info:
            await judge.judge(question())
        await judge.aclose()
    assert info.value.status == status
    assert not info.value.retryable
    assert len(server.posts) == 1


async def test_missing_logprobs_falls_back_to_strict_json_in_auto_mode() -> None:
    metrics = Metrics()
    async with llm_server(always="nologprobs", text='{"output": "No"}') as server:
        judge = make_judge(server, metrics)
        first = await judge.judge(question())
        second = await judge.judge(question("other text"))
        await judge.aclose()
    assert first.probabilities == {"yes": 0.0, "no": 1.0}
    assert second.p("no") == 1.0
    # The result says these are stated answers, not graded probabilities, and so does
    # the metric a dashboard watches for a backend that quietly stopped giving logprobs.
    assert first.info.probabilities_from == second.info.probabilities_from == "json"
    assert counter(metrics, "evalstream_judge_answers_total", judge="llm", source="json") == 2
    assert counter(metrics, "evalstream_judge_answers_total", judge="llm",
                   source="logprobs") == 0
    # Each question: logprobs asked, none came, then its JSON request. (Only a run of such
    # responses switches logprobs off: test_judge_endpoint_faults.)
    asked = [bool(r.body.get("logprobs")) for r in server.posts]
    assert asked == [True, False, True, False]
    assert server.posts[1].body["max_tokens"] == 16
    assert '{"output": ANSWER}' in server.posts[1].body["messages"][0]["content"]


async def test_a_400_not_about_logprobs_keeps_logprobs_in_auto_mode() -> None:
    # "bad model parameter" says nothing about logprobs: that request fails, the next one
    # still asks for logprobs. (A 400 naming logprobs switches: test_judge_endpoint_faults.)
    async with llm_server() as server:
        server.fail_next("400")
        judge = make_judge(server)
        with pytest.raises(JudgeError, match="HTTP 400"):
            await judge.judge(question())
        answer = await judge.judge(question("other"))
        await judge.aclose()
    assert answer.p("yes") == pytest.approx(0.8 / 0.95)
    assert [bool(r.body.get("logprobs")) for r in server.posts] == [True, True]


async def test_missing_logprobs_is_an_error_when_required() -> None:
    async with llm_server(always="nologprobs") as server:
        judge = make_judge(server, logprobs="always")
        with pytest.raises(JudgeError, match="returned no logprobs"):
            await judge.judge(question())
        await judge.aclose()


async def test_never_mode_parses_json_strictly() -> None:
    async with llm_server(text="Sure! The answer is yes.") as server:
        judge = make_judge(server, logprobs="never")
        with pytest.raises(JudgeError, match="not JSON"):
            await judge.judge(question())
        server.text = '{"output": "perhaps"}'
        with pytest.raises(JudgeError, match="not one of"):
            await judge.judge(question("x"))
        server.text = '```json\n{"output": "YES"}\n```'
        answer = await judge.judge(question("y"))
        await judge.aclose()
    assert answer.p("yes") == 1.0
    assert all("logprobs" not in r.body for r in server.posts)


async def test_no_option_in_top_tokens_is_a_clear_error_or_json_fallback() -> None:
    async with llm_server(always="nooptions") as server:
        judge = make_judge(server)
        with pytest.raises(JudgeError, match="none of the answer options") as info:
            await judge.judge(question())
        assert "'The'" in str(info.value)
        assert "set on_missing_options: json" in str(info.value)  # what to do about it
        fallback = make_judge(server, on_missing_options="json")
        answer = await fallback.judge(question())
        await judge.aclose()
        await fallback.aclose()
    assert answer.p("yes") == 1.0


async def test_concurrency_limit_holds_at_the_server() -> None:
    async with llm_server(delay_s=0.05) as server:
        judge = make_judge(server, max_concurrency=4)
        answers = await asyncio.gather(*(judge.judge(question(f"answer {i}"))
                                         for i in range(24)))
        await judge.aclose()
    assert len(answers) == 24
    assert len(server.posts) == 24
    assert server.max_concurrent == 4  # reached, never exceeded


async def test_requests_per_second_limit() -> None:
    async with llm_server() as server:
        judge = make_judge(server, requests_per_s=10.0)
        start = time.monotonic()
        await asyncio.gather(*(judge.judge(question(f"a{i}")) for i in range(14)))
        elapsed = time.monotonic() - start
        await judge.aclose()
    assert len(server.posts) == 14
    # A 10-request burst, then 10/s: the 14th request cannot be sent before 0.4 s.
    assert elapsed >= 0.38


async def test_circuit_opens_waits_and_closes_after_a_successful_probe() -> None:
    metrics = Metrics()
    async with llm_server(always="500") as server:
        judge = make_judge(server, metrics, max_retries=0, circuit_failures=3,
                           circuit_reset_s=0.4)
        for i in range(3):
            with pytest.raises(JudgeError):
                await judge.judge(question(f"fail {i}"))
        assert judge.circuit_state is CircuitState.OPEN
        assert counter(metrics, "evalstream_judge_circuit_state", judge="llm") == 2
        opened = time.time()
        server.always = None  # the backend recovers
        waiting = [asyncio.create_task(judge.judge(question(f"wait {i}"))) for i in range(5)]
        answers = await asyncio.gather(*waiting)
        await judge.aclose()
    assert all(a.p("yes") > 0.8 for a in answers)  # nothing dropped: they waited
    later = [r.at for r in server.posts[3:]]
    assert min(later) - opened >= 0.3  # no request while the circuit was open
    assert judge.circuit_state is CircuitState.CLOSED
    assert counter(metrics, "evalstream_judge_circuit_state", judge="llm") == 0


@pytest.mark.parametrize(("fault", "state"), [
    ("401", CircuitState.CLOSED), ("429", CircuitState.CLOSED), ("400", CircuitState.CLOSED),
    ("500", CircuitState.OPEN), ("nonjson", CircuitState.OPEN), ("reset", CircuitState.OPEN)])
async def test_only_a_failing_backend_opens_the_circuit(fault: str, state: CircuitState) -> None:
    # A 4xx is an answer (the request, or its rate, was at fault); no answer, a 5xx or an
    # unreadable 200 body says the backend itself is unhealthy.
    async with llm_server(always=fault) as server:
        # rate_limit_retry: max_retries, or a 429 is retried until the deadline (10 s).
        judge = make_judge(server, max_retries=0, circuit_failures=1, circuit_reset_s=60,
                           rate_limit_retry="max_retries")
        with pytest.raises(JudgeError):
            await judge.judge(question())
        await judge.aclose()
    assert judge.circuit_state is state


async def test_deadline_turns_an_outage_into_judge_unavailable() -> None:
    metrics = Metrics()
    async with llm_server(always="500") as server:
        judge = make_judge(server, metrics, max_retries=100, backoff_base_s=0.05,
                           backoff_max_s=0.1, deadline_s=2.0, timeout_s=1.0,
                           circuit_failures=2, circuit_reset_s=0.5)
        start = time.monotonic()
        with pytest.raises(JudgeUnavailableError, match="deadline") as info:
            await judge.judge(question())
        elapsed = time.monotonic() - start
        await judge.aclose()
    # The lower bound proves it kept trying until the deadline. The upper bound is loose
    # on purpose (a loaded CI machine may be slow): it only has to be far below the
    # ~50 s that 100 retries throttled by a 0.5 s circuit reset would take.
    assert 1.9 <= elapsed < 20.0
    assert "HTTP 500" in str(info.value)
    # the breaker throttled it: ~1 probe per reset period, not 100 retries
    assert len(server.posts) <= 8
    assert counter(metrics, "evalstream_judge_requests_total", judge="llm",
                   outcome="deadline") == 1


async def test_cache_serves_identical_requests() -> None:
    metrics = Metrics()
    async with llm_server(delay_s=0.05) as server:
        judge = make_judge(server, metrics, cache_size=100)
        first, second, third = await asyncio.gather(
            judge.judge(question()), judge.judge(question()), judge.judge(question()))
        again = await judge.judge(question())
        other = await judge.judge(question("different"))
        await judge.aclose()
    assert len(server.posts) == 2
    assert first.p("yes") == second.p("yes") == third.p("yes") == again.p("yes") == other.p("yes")
    assert not first.info.cached
    assert again.info.cached
    assert again.info.tokens_in == 0
    assert counter(metrics, "evalstream_judge_cache_hits_total", judge="llm") == 3
    # A hit keeps how its answer was given; only the two answers sent are counted.
    assert again.info.probabilities_from == "logprobs"
    assert counter(metrics, "evalstream_judge_answers_total", judge="llm",
                   source="logprobs") == 2


async def test_generate_plain_and_json() -> None:
    async with llm_server(text='{"role": "travel agent", "behaviours": ["be brief"]}') as server:
        judge = make_judge(server)
        gen = await judge.generate(GenerateRequest(
            task="role_extraction", instructions="Extract the role.",
            data=(("system_prompt", "You are a travel agent. Be brief."),),
            json_schema_hint='{"role": str, "behaviours": [str]}'))
        server.text = "not json at all"
        with pytest.raises(JudgeError, match="not valid JSON"):
            await judge.generate(GenerateRequest(
                task="role_extraction", instructions="Extract.", data=(("system_prompt", "x"),),
                json_schema_hint="{}"))
        reason = await judge.generate(GenerateRequest(task="reason", instructions="Explain."))
        await judge.aclose()
    assert gen.value == {"role": "travel agent", "behaviours": ["be brief"]}
    assert gen.info.probabilities_from is None  # generated text, not a closed question
    assert reason.text == "not json at all"
    assert server.posts[0].body["max_tokens"] == 200


async def test_azure_style_key_header_and_api_version() -> None:
    async with llm_server() as server:
        judge = make_judge(server, api_key="azure-secret-123", api_key_header="api-key",
                           query={"api-version": "2024-06-01"})
        await judge.judge(question())
        await judge.aclose()
    sent = server.posts[0]
    assert sent.path == "/v1/chat/completions?api-version=2024-06-01"
    assert sent.headers["api-key"] == "azure-secret-123"
    assert "authorization" not in sent.headers
