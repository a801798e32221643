"""The OpenAI-compatible judge against endpoints that answer oddly (real local sockets).

``ScriptedLLM`` is the shared fake server (tests/support/llm_server) with one more knob: a
``script`` that may answer a request with any status, body bytes and headers (a content
filter's 400, ``"logprobs": null``, NaN token counts, a corrupt gzip body), falling back to
the normal provider answer when it returns None.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.resilience import CircuitState
from evalstream.metrics import Metrics
from tests.support.llm_server import FakeLLM, serving

#: (status, body bytes, extra headers)
Reply = tuple[int, bytes, dict[str, str]]


@dataclass
class ScriptedLLM(FakeLLM):
    """A FakeLLM whose ``script`` may answer a request itself."""

    script: Callable[[Any], Reply | None] | None = None

    async def _respond(self, writer: asyncio.StreamWriter, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        reply = self.script(body) if self.script is not None else None
        if reply is None:
            return await super()._respond(writer, path, body, headers)
        status, data, extra = reply
        await self._send_raw(writer, status, data, "application/json", extra)
        return True


def scripted(script: Callable[[Any], Reply | None], **kwargs: Any
             ) -> contextlib.AbstractAsyncContextManager[ScriptedLLM]:
    return serving(ScriptedLLM(script=script, **kwargs))


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


def make_judge(server: FakeLLM, metrics: Metrics | None = None, **overrides: Any) -> OpenAIJudge:
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "api": "chat", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "max_retries": 3, "deadline_s": 10.0,
        "cache_size": 0}
    settings.update(overrides)
    return OpenAIJudge("llm", OpenAIJudgeConfig(**settings), metrics or Metrics())


def question(output: str = "I can't help with that.") -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", output),))


def reply(status: int, payload: Any, **headers: str) -> Reply:
    return status, json.dumps(payload).encode(), headers


def sent_text(body: Any) -> str:
    return str(body["messages"][-1]["content"])


def asked_logprobs(server: FakeLLM) -> list[bool]:
    return [bool(r.body.get("logprobs")) for r in server.posts]


# --- logprobs: auto mode is switched off only by real capability signals ---------------


@pytest.mark.parametrize(("status", "error", "message"), [
    (400, {"error": {"code": "content_filter", "param": "prompt",
                     "message": "The response was filtered due to the prompt triggering "
                                "Azure OpenAI's content management policy."}},
     "content management policy"),
    # A gateway's 200 wrapping a 400 that is not about logprobs: the same error.
    (200, {"error": {"code": "400", "message": "prompt is too long"}}, "prompt is too long"),
], ids=["400", "200-wrapping-a-400"])
async def test_an_unrelated_400_fails_that_request_and_keeps_logprobs(
        status: int, error: dict[str, Any], message: str) -> None:
    def script(body: Any) -> Reply | None:
        return reply(status, error) if "BADWORDS" in sent_text(body) else None

    async with scripted(script) as server:
        judge = make_judge(server)
        with pytest.raises(JudgeError, match=message) as info:
            await judge.judge(question("BADWORDS"))
        after = await judge.judge(question("an ordinary answer"))
        await judge.aclose()
    assert info.value.status == 400
    assert not info.value.retryable
    assert after.p("yes") == pytest.approx(0.8 / 0.95)  # still read from logprobs
    assert asked_logprobs(server) == [True, True]


@pytest.mark.parametrize(("status", "error"), [
    (400, {"error": {"message": "logprobs is not supported for this model",
                     "type": "invalid_request_error", "param": None}}),
    (400, {"error": {"message": "Invalid parameter", "param": "top_logprobs"}}),
    (400, {"error": "Unsupported parameter: 'logprobs'"}),
    # A gateway that wraps the backend's rejection in a 200 (OpenRouter-style error body):
    # the same rejection as an HTTP 400 saying so. Was a generic, non-retryable JudgeError
    # failing every evaluation while logprobs stayed on.
    (200, {"error": {"code": 400, "message": "logprobs is not supported"}}),
], ids=["400-openai", "400-param", "400-string", "200-wrapping-a-400"])
async def test_a_rejection_naming_logprobs_switches_auto_mode_to_json(
        status: int, error: dict[str, Any]) -> None:
    def script(body: Any) -> Reply | None:
        return reply(status, error) if body.get("logprobs") else None

    async with scripted(script) as server:
        judge = make_judge(server)
        first = await judge.judge(question())
        second = await judge.judge(question("other"))
        await judge.aclose()
    assert first.p("yes") == 1.0  # the server's JSON answer '{"output": "yes"}'
    assert second.p("yes") == 1.0
    assert asked_logprobs(server) == [True, False, False]


async def test_a_400_naming_logprobs_is_still_an_error_when_logprobs_are_required() -> None:
    def script(body: Any) -> Reply | None:
        return reply(400, {"error": {"message": "bad", "param": "logprobs"}})

    async with scripted(script) as server:
        judge = make_judge(server, logprobs="always")
        with pytest.raises(JudgeError, match="HTTP 400") as info:
            await judge.judge(question())
        await judge.aclose()
    assert info.value.status == 400
    assert len(server.posts) == 1


async def test_one_response_without_logprobs_falls_back_for_that_request_only() -> None:
    filtered = {"choices": [{"index": 0, "finish_reason": "content_filter",
                             "message": {"role": "assistant", "content": None},
                             "logprobs": None}]}

    def script(body: Any) -> Reply | None:
        if "TOXIC" in sent_text(body) and body.get("logprobs"):
            return reply(200, filtered)
        return None

    async with scripted(script, text='{"output": "no"}') as server:
        judge = make_judge(server)
        toxic = await judge.judge(question("TOXIC"))
        after = await judge.judge(question("an ordinary answer"))
        await judge.aclose()
    assert toxic.probabilities == {"yes": 0.0, "no": 1.0}  # its JSON answer
    assert after.p("yes") == pytest.approx(0.8 / 0.95)  # logprobs again
    assert asked_logprobs(server) == [True, False, True]


async def test_a_run_of_responses_without_logprobs_switches_auto_mode_off() -> None:
    async with scripted(lambda body: None, always="nologprobs",
                        text='{"output": "No"}') as server:
        judge = make_judge(server)
        answers = [await judge.judge(question(f"answer {i}")) for i in range(4)]
        await judge.aclose()
    assert all(a.probabilities == {"yes": 0.0, "no": 1.0} for a in answers)
    # Three logprob requests without logprobs (each followed by its JSON request), then JSON.
    assert asked_logprobs(server) == [True, False] * 3 + [False]


async def test_a_response_with_logprobs_resets_the_run() -> None:
    misses = iter([True, True, False, True, True, False])

    def script(body: Any) -> Reply | None:
        if body.get("logprobs") and next(misses):
            return reply(200, {"choices": [{"message": {"content": "yes"}, "logprobs": None}]})
        return None

    async with scripted(script) as server:
        judge = make_judge(server)
        for i in range(6):
            await judge.judge(question(f"answer {i}"))
        await judge.aclose()
    # Never three misses in a row: every question still asks for logprobs first.
    assert asked_logprobs(server).count(True) == 6


# --- unusual numbers -----------------------------------------------------------------


def chat_logprobs(top: list[dict[str, Any]]) -> dict[str, Any]:
    return {"choices": [{"message": {"content": "yes"}, "logprobs": {"content": [
        {"token": "yes", "logprob": -0.1, "top_logprobs": top}]}}]}


async def test_garbled_numbers_never_escape_as_python_errors() -> None:
    bodies = iter([
        # a positive logprob (impossible; math.exp overflows above ~709): corrupt
        json.dumps(chat_logprobs([{"token": "yes", "logprob": 1000.0},
                                  {"token": "no", "logprob": -2.0}])).encode(),
        # both positive: clamped, this read as a confident-looking 50/50 that passed
        json.dumps(chat_logprobs([{"token": "yes", "logprob": 50.0},
                                  {"token": "no", "logprob": 49.0}])).encode(),
        # rounding noise just above 0 is a certain token, not corruption
        json.dumps(chat_logprobs([{"token": "yes", "logprob": 3e-7},
                                  {"token": "no", "logprob": -9.0}])).encode(),
        # NaN token counts (Python's json accepts the bare NaN literal)
        b'{"choices":[{"message":{"content":"yes"},"logprobs":{"content":[{"token":"yes",'
        b'"logprob":-0.1,"top_logprobs":[{"token":"yes","logprob":-0.1},'
        b'{"token":"no","logprob":-2.4}]}]}}],'
        b'"usage":{"prompt_tokens":NaN,"completion_tokens":Infinity}}',
    ])

    def script(body: Any) -> Reply | None:
        return 200, next(bodies), {}

    metrics = Metrics()
    async with scripted(script) as server:
        judge = make_judge(server, metrics, price_input_per_1k=1.0)
        for corrupt in ("a", "a2"):
            with pytest.raises(JudgeError, match="unreadable logprobs") as info:
                await judge.judge(question(corrupt))
            assert not info.value.retryable
        certain = await judge.judge(question("a3"))
        counted = await judge.judge(question("b"))
        await judge.aclose()
    assert certain.p("yes") == pytest.approx(1 / (1 + math.exp(-9.0)))
    assert counted.p("yes") == pytest.approx(math.exp(-0.1) / (math.exp(-0.1) + math.exp(-2.4)))
    assert counted.info.tokens_in == 0
    assert counted.info.tokens_out == 0
    assert counted.info.cost_usd == 0.0


async def test_an_answer_that_cannot_be_read_is_a_non_retryable_judge_error() -> None:
    # Valid JSON nested too deeply for Python's parser (RecursionError) inside the answer.
    nested = "[" * 100_000 + "]" * 100_000
    async with scripted(lambda body: None, text='{"output": ' + nested + "}") as server:
        judge = make_judge(server, logprobs="never")
        with pytest.raises(JudgeError, match="unreadable answer") as info:
            await judge.judge(question())
        await judge.aclose()
    assert not info.value.retryable
    assert len(server.posts) == 1


# --- circuit breaker: the half-open probe is always released -----------------------------


async def wait_until(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def test_a_probe_cancelled_while_recording_its_outcome_releases_the_breaker() -> None:
    # The probe's answer arrives while another task holds the breaker's lock (in production:
    # waiters re-taking it after notify_all or their own timeouts), so the probe's deadline
    # cancels it inside record(). The probe must still be released, or the breaker stays
    # half-open and every later request waits for it until its own deadline.
    # Sequenced by events, not by racing sleeps: the server answers only once the lock is
    # held, and the lock is released only once the cancelled probe has let go of its slot,
    # so the steps happen in this order however slow the machine is. The deadline only has
    # to outlast reading one local HTTP answer.
    gate = asyncio.Event()

    @dataclass
    class GatedLLM(ScriptedLLM):
        async def _respond(self, writer: asyncio.StreamWriter, path: str, body: Any,
                           headers: dict[str, str]) -> bool:
            await gate.wait()
            return await super()._respond(writer, path, body, headers)

    server = GatedLLM(script=lambda body: None)
    await server.start()
    try:
        judge = make_judge(server, max_retries=0, circuit_failures=1, circuit_reset_s=0.05,
                           timeout_s=1.5, deadline_s=1.5)
        breaker = judge._breaker  # private: the lock record() must take
        server.fail_next("500")
        gate.set()
        with pytest.raises(JudgeError, match="HTTP 500"):
            await judge.judge(question("outage"))
        assert judge.circuit_state is CircuitState.OPEN
        gate.clear()
        await asyncio.sleep(0.1)  # the reset period passes: the next request is the probe

        recording = asyncio.Event()
        record = breaker.record

        async def spy_record(ok: bool, *, probe: bool = False) -> None:
            recording.set()
            await record(ok, probe=probe)

        breaker.record = spy_record  # type: ignore[method-assign]

        async def hold_breaker_lock() -> None:
            await wait_until(lambda: len(server.posts) == 2)  # the probe is at the server
            async with breaker._cond:
                gate.set()  # now let the probe's answer come back
                # Until the cancelled probe frees its slot (abandon() does that before it
                # waits for this lock); bounded so a regression fails instead of hanging.
                with contextlib.suppress(TimeoutError):
                    await wait_until(lambda: not breaker._probing, timeout=5.0)

        holder = asyncio.create_task(hold_breaker_lock())
        with pytest.raises(JudgeUnavailableError, match="deadline"):
            await judge.judge(question("probe"))
        await holder
        assert recording.is_set()  # the deadline hit inside record(), the case under test
        breaker.record = record  # type: ignore[method-assign]
        answer = await judge.judge(question("after the outage"))
        await judge.aclose()
    finally:
        await server.stop()
    assert answer.p("yes") == pytest.approx(0.8 / 0.95)
    assert judge.circuit_state is CircuitState.CLOSED


# --- a corrupt body is classified like a transport error ---------------------------------


CORRUPT_GZIP: Reply = (200, b"not gzip at all", {"Content-Encoding": "gzip"})


async def test_a_corrupt_body_is_retried_then_answers() -> None:
    corrupt = iter([True, True])

    def script(body: Any) -> Reply | None:
        return CORRUPT_GZIP if next(corrupt, False) else None

    metrics = Metrics()
    async with scripted(script) as server:
        judge = make_judge(server, metrics)
        answer = await judge.judge(question())
        await judge.aclose()
    assert answer.p("yes") == pytest.approx(0.8 / 0.95)
    assert answer.info.requests == 3
    assert metrics.registry.get_sample_value(
        "evalstream_judge_requests_total", {"judge": "llm", "outcome": "retry"}) == 2


async def test_corrupt_bodies_exhaust_retries_and_open_the_circuit() -> None:
    async with scripted(lambda body: CORRUPT_GZIP) as server:
        judge = make_judge(server, max_retries=2, circuit_failures=3, circuit_reset_s=60.0)
        with pytest.raises(JudgeError, match=r"DecodingError .*after 3 attempts") as info:
            await judge.judge(question())
        await judge.aclose()
    assert info.value.retryable
    assert len(server.posts) == 3
    assert judge.circuit_state is CircuitState.OPEN  # counted as server failures


# --- labels the first token cannot tell apart --------------------------------------------


async def test_multi_token_labels_are_asked_for_a_json_answer() -> None:
    # A BPE model meaning "account_security" starts with the token "account": read from
    # logprobs, that is 97 % "account". Such option sets go to the JSON answer instead.
    labels = ("account", "account_security", "other")
    request = JudgeRequest(task="classifier", instructions="Pick the label.",
                           question="Which label fits?", options=labels,
                           data=(("output", "Someone logged into my account from abroad."),))
    async with scripted(lambda body: None, distribution={"account": 0.97, "security": 0.03},
                        text='{"output": "account_security"}') as server:
        judge = make_judge(server)
        first = await judge.judge(request)
        again = await judge.judge(replace(request, data=(("output", "2FA?"),)))
        server.distribution = {"Yes": 0.7, " yes": 0.1, "No": 0.15, " maybe": 0.05}
        yes_no = await judge.judge(question())
        await judge.aclose()
    assert first.probabilities == {"account": 0.0, "account_security": 1.0, "other": 0.0}
    assert again.p("account_security") == 1.0
    assert yes_no.p("yes") == pytest.approx(0.8 / 0.95)  # other option sets keep logprobs
    assert asked_logprobs(server) == [False, False, True]
