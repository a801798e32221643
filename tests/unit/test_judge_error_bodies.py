"""HTTP 200 answers whose body is an error object, not an answer (real local sockets).

OpenRouter answers 200 with ``{"error": {"code": 502, "message": ...}}`` when the model
fails after the request was accepted, the code holding an HTTP-like status; other gateways
send ``{"error": "some text"}``. The judge reports the server's message (scrubbed, bounded)
and retries exactly when the code is a status it retries for real (408/409/425/429/5xx).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from evalstream.errors import JudgeError
from evalstream.judges.openai_wire import classify_response
from evalstream.metrics import Metrics
from tests.unit.test_judge_endpoint_faults import Reply, make_judge, question, reply, scripted

SECRET = "sk-test-0123456789abcdef"
APIS = ["chat", "completions"]


def error_body(code: Any, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "metadata": {"provider_name": "x"}}}


@pytest.mark.parametrize("api", APIS)
async def test_a_retryable_error_body_is_retried_then_answers(api: str) -> None:
    failures = iter([error_body(502, "Upstream provider is down"),
                     error_body(429, "Rate limited upstream")])

    def script(body: Any) -> Reply | None:
        failure = next(failures, None)
        return reply(200, failure) if failure else None

    metrics = Metrics()
    style = "openai_chat" if api == "chat" else "openai_completions"
    async with scripted(script, style=style) as server:
        judge = make_judge(server, metrics, api=api)
        answer = await judge.judge(question())
        await judge.aclose()
    assert answer.p("yes") == pytest.approx(0.8 / 0.95)
    assert answer.info.requests == 3
    assert len(server.posts) == 3
    sample = metrics.registry.get_sample_value
    assert sample("evalstream_judge_requests_total", {"judge": "llm", "outcome": "retry"}) == 1
    assert sample("evalstream_judge_requests_total",
                  {"judge": "llm", "outcome": "rate_limited"}) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_retryable_error_body_that_persists_exhausts_the_retries(api: str) -> None:
    async with scripted(lambda body: reply(200, error_body(503, "No provider available")),
                        ) as server:
        judge = make_judge(server, api=api, max_retries=2)
        with pytest.raises(JudgeError, match=r"No provider available.*after 3 attempts") as info:
            await judge.judge(question())
        await judge.aclose()
    assert info.value.retryable
    assert info.value.status == 503
    assert len(server.posts) == 3


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("error", [
    error_body(400, f"Invalid request with key {SECRET}"),
    error_body("invalid_api_key", f"Incorrect API key provided: {SECRET}"),
    {"error": f"model refused, key {SECRET}"},
])
async def test_a_non_retryable_error_body_fails_once_with_the_scrubbed_message(
        api: str, error: dict[str, Any]) -> None:
    async with scripted(lambda body: reply(200, error)) as server:
        judge = make_judge(server, api=api, api_key=SECRET)
        with pytest.raises(JudgeError) as info:
            await judge.judge(question())
        await judge.aclose()
    message = str(info.value)
    assert not info.value.retryable
    assert len(server.posts) == 1
    assert SECRET not in message
    assert "***" in message, "the server's message should be in the error, scrubbed"
    assert "no answer text" not in message
    assert server.posts[0].headers["authorization"] == f"Bearer {SECRET}"  # it was sent


async def test_the_message_is_bounded_and_utf8_safe() -> None:
    # A lone surrogate (a message cut inside an emoji) and far more text than an error needs.
    data = b'{"error": {"code": 500, "message": "cut \\ud83d' + b"x" * 10_000 + b'"}}'
    async with scripted(lambda body: (200, data, {})) as server:
        judge = make_judge(server, max_retries=0)
        with pytest.raises(JudgeError, match=r"cut \?x") as info:
            await judge.judge(question())
        await judge.aclose()
    message = str(info.value)
    message.encode("utf-8")  # raises on a lone surrogate
    assert len(message) < 500
    assert info.value.retryable


async def test_a_null_or_empty_error_next_to_an_answer_is_not_an_error() -> None:
    bodies = iter([{"error": None}, {"error": ""}, {"error": {}}])

    def script(body: Any) -> Reply | None:
        return None  # the normal answer, patched below with an "error" member

    async with scripted(script) as server:
        judge = make_judge(server, logprobs="never")
        for extra in bodies:
            server.script = lambda body, extra=extra: _with(extra)
            answer = await judge.judge(question(f"q{len(server.posts)}"))
            assert answer.p("yes") == 1.0
        await judge.aclose()


def _with(extra: dict[str, Any]) -> Reply:
    answer = {"choices": [{"index": 0, "message": {"role": "assistant",
                                                   "content": '{"output": "yes"}'}}]}
    return reply(200, {**answer, **extra})


@pytest.mark.parametrize(("code", "retryable"), [
    (408, True), (409, True), (425, True), (429, True), (500, True), (502, True), ("503", True),
    (599, True), (400, False), (401, False), (402, False), (404, False), (200, False),
    ("server_error", False), (None, False), (True, False), (5000, False), (502.0, False),
    ("9" * 5000, False),
])
def test_an_error_body_is_retryable_exactly_as_its_code_would_be(code: Any,
                                                                 retryable: bool) -> None:
    response = httpx.Response(200, content=json.dumps(error_body(code, "boom")).encode())
    body, error = classify_response(response, judge="j", host="h", redact=lambda s: s)
    assert body == error_body(code, "boom")  # returned for its usage
    assert error is not None
    assert error.retryable is retryable
    assert "boom" in str(error)


async def test_the_usage_an_error_body_reports_is_counted() -> None:
    # A model that failed mid-generation may still have been billed for what it read and
    # wrote: what the body reports counts towards the cost and the spend cap, as before
    # such bodies were recognised as errors.
    failures = iter([{**error_body(502, "Provider died mid-answer"),
                      "usage": {"prompt_tokens": 1000, "completion_tokens": 500}}])

    def script(body: Any) -> Reply | None:
        failure = next(failures, None)
        return reply(200, failure) if failure else None

    metrics = Metrics()
    async with scripted(script) as server:
        judge = make_judge(server, metrics, price_input_per_1k=1.0, price_output_per_1k=2.0)
        answer = await judge.judge(question())
        await judge.aclose()
    answered = server.posts[1]
    answered_in = max(1, len(json.dumps(answered.body)) // 4)  # what the fake server reports
    assert answer.info.requests == 2
    assert answer.info.tokens_in == 1000 + answered_in
    assert answer.info.tokens_out == 500 + 1
    cost = metrics.registry.get_sample_value("evalstream_judge_cost_usd_total",
                                             {"judge": "llm"})
    assert cost == pytest.approx(((1000 + answered_in) * 1.0 + 501 * 2.0) / 1000)
