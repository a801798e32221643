"""Property: whatever a judge backend sends back, the OpenAI-compatible judge answers with a
usable ``Judgement`` or raises a ``JudgeError``, in bounded time, and leaves itself usable.

A local HTTP server on a real socket (``tests/support/llm_server``) answers each request
with raw bytes hypothesis chose up front: the provider's own body for each flavour (chat,
completions, llama.cpp native; OpenAI, vLLM and llama.cpp shapes) with fields mutated at
every path, logprob tables with odd numbers and tokens, lenient or broken JSON, HTML error
pages, every status class with and without ``Retry-After``, odd content types and
charsets, gzip bodies (valid and not), truncated and dripped bodies. For each answer:

* ``judge()`` returns finite probabilities over exactly the asked options, summing to 1,
  or raises ``JudgeError`` (never another exception type);
* an HTTP error status is retryable exactly when its semantics say so (408, 409, 425, 429
  and 5xx; the pinned table below also checks how often each is sent), and the work is
  bounded (at most ``max_retries + 1`` attempts per logical request, not counting the
  rate-limited ones with ``rate_limit_retry: until_deadline``: the deadline bounds those);
* the API key is never in the error message, however the server echoes it;
* the call ends within the deadline (plus a margin for a loaded machine), and a body
  over the size limit, on the wire or once inflated, is refused without being held;
* the circuit breaker is consistent afterwards (no probe left taken, its gauge agrees),
  and the judge answers the next question once the backend is healthy again;
* through an evaluator and the pipeline, the result (ok or error) serialises and matches
  the committed schema.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import math
import time
import tracemalloc
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from evalstream.app.pipeline import Pipeline
from evalstream.config import Settings
from evalstream.config.judges import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.events import EvalResult, TraceEvent
from evalstream.judges.base import GenerateRequest, JudgeRequest
from evalstream.judges.builtin import BuiltinJudge
from evalstream.judges.cascade import CascadeJudge
from evalstream.judges.http_pool import MAX_BODY_BYTES
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.resilience import CircuitState
from evalstream.metrics import Metrics
from tests.support.fuzz import FUZZ, json_bytes, json_values, mutate, odd_json_documents
from tests.support.llm_server import STYLES, FakeLLM, serving
from tests.unit.test_fuzz_pipeline import check_wire

KEY = "sk-fuzz-5ecretKey-0123456789abcdef"
#: Ways a server may echo the credential back: in an error message, an HTML page, the
#: answer text, a token.
ECHOES = (KEY, f"Bearer {KEY}", f"Incorrect API key provided: {KEY}.",
          f'{{"output": "{KEY}"}}', f"authorization: Bearer {KEY}")
API = {"openai_chat": "chat", "vllm_chat": "chat", "llamacpp_chat": "chat",
       "openai_completions": "completions", "vllm_completions": "completions",
       "llamacpp_native": "llamacpp", "llamacpp_native_old": "llamacpp"}
YES_NO = ("yes", "no")
SCALE = ("1", "2", "3", "4", "5")
#: Small limits, so a slow or stubborn backend costs well under a second per example.
TIMEOUT_S = 0.25
DEADLINE_S = 0.6
#: Slack on the deadline for a loaded 2-core machine (the call itself is bounded by it).
MARGIN_S = 1.0
RETRYABLE_4XX = {408, 409, 425, 429}


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


# --- the server: raw answers ------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One HTTP answer, as the bytes written to the socket."""

    data: bytes
    #: Write in pieces of this many bytes (0: at once), pausing ``drip_s`` between them.
    chunk: int = 0
    drip_s: float = 0.0
    #: Close the connection once written (else keep it, as for the next request).
    close: bool = False


def http(status: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = (),
         *, length: int | None = -1, prefix: bytes = b"") -> bytes:
    """A raw HTTP/1.1 response; ``length`` -1: the body's own, None: no Content-Length."""
    lines = [f"HTTP/1.1 {status} Fuzz", *(f"{k}: {v}" for k, v in headers)]
    if length is not None:
        lines.append(f"Content-Length: {len(body) if length == -1 else length}")
    return prefix + ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass
class WireLLM(FakeLLM):
    """A FakeLLM that plays ``answers`` in order (the last one again and again), then, once
    they are cleared, answers like the provider again."""

    answers: list[Answer] = field(default_factory=list)
    sent: int = 0
    #: Attempts the judge counted as rate limited in the first question (run_case).
    rate_limited: int = 0

    async def _respond(self, writer: asyncio.StreamWriter, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        if not self.answers:
            return await super()._respond(writer, path, body, headers)
        answer = self.answers[min(self.sent, len(self.answers) - 1)]
        self.sent += 1
        step = answer.chunk or len(answer.data) or 1
        for start in range(0, len(answer.data), step):
            if start and answer.drip_s:
                await asyncio.sleep(answer.drip_s)
            writer.write(answer.data[start:start + step])
            await writer.drain()
        if answer.close:
            writer.transport.abort()
        return not answer.close


# --- valid-shaped bodies, then mutated ---------------------------------------------------

DISTRIBUTION = {"Yes": 0.55, " no": 0.25, "4": 0.1, "2": 0.05, " maybe": 0.05}


def template(style: str, logprobs: bool, text: str = '{"output": "yes"}') -> dict[str, Any]:
    """The body the provider of ``style`` answers a logprob (or a JSON-answer) request with."""
    request: dict[str, Any] = {"model": "m"}
    if logprobs:
        request.update({"chat": {"logprobs": True, "top_logprobs": 5},
                        "completions": {"logprobs": 5},
                        "llamacpp": {"n_probs": 5}}[API[style]])
    body = FakeLLM(style=style, text=text)._payload(request, DISTRIBUTION, True)
    return json.loads(json.dumps(body))


#: Values put in place of a field: any JSON, lenient numbers (NaN, Infinity), the key.
odd_values = st.one_of(
    json_values,
    st.sampled_from([None, [], {}, "", 0, -1, True, math.nan, math.inf, -math.inf, 1e308,
                     -1e308, 5e-324, 2**64, "yes", " Yes", "-0.1", [None], [[]], [{}]]),
    st.sampled_from(ECHOES),
)

#: Tokens that fold to an option, nearly do, or are odd in themselves.
tokens = st.one_of(
    st.sampled_from(["yes", "Yes", " yes", "YES", "yes.", "\u2581yes", "\u0120Yes", "yes\n",
                     "\tNo ", "no", "NO!", "n", "ye", "yess", "\uff59\uff45\uff53", "y\u0435s",
                     "\u200byes", "yes\u0301", "1", " 4", "5.", "10", "", " ", "\x00",
                     "\ud800", "\U0001f600", KEY]),
    st.text(max_size=8),
)
#: Logprobs (or probabilities) that are odd: non-finite, above 0, huge, wrong types.
numbers = st.one_of(
    st.floats(max_value=0.0, allow_nan=False),
    st.sampled_from([0.0, -0.0, 1e-5, 1e-3, 0.5, 1.0, 1.5, 50.0, 1e308, -1e308, 5e-324,
                     -5e-324, math.nan, math.inf, -math.inf, 2**64, -(2**70), None, "-0.1",
                     True, [], {}]),
)


@st.composite
def logprob_tables(draw: st.DrawFn, style: str) -> dict[str, Any]:
    """A valid-shaped logprob body of ``style`` whose first position lists drawn entries,
    possibly very many, duplicated or with odd numbers."""
    entries = draw(st.lists(st.tuples(tokens, numbers), max_size=8))
    repeat = draw(st.sampled_from([1, 1, 1, 50, 5_000]))
    entries = entries * repeat
    body = template(style, logprobs=True)
    if API[style] == "chat":
        top = [{"token": t, "logprob": n, "bytes": None} for t, n in entries]
        first = {"token": "yes", "logprob": draw(numbers), "top_logprobs": top}
        body["choices"][0]["logprobs"]["content"] = [first]
    elif API[style] == "completions":
        body["choices"][0]["logprobs"]["top_logprobs"] = [dict(entries)]
    elif style == "llamacpp_native":
        body["completion_probabilities"] = [
            {"token": "yes", "logprob": -0.1,
             "top_logprobs": [{"id": i, "token": t, "logprob": n}
                              for i, (t, n) in enumerate(entries)]}]
    else:
        body["completion_probabilities"] = [
            {"content": "yes", "probs": [{"tok_str": t, "prob": n} for t, n in entries]}]
    return body


def lenient(document: Any) -> bytes:
    """``document`` as Python's json writes it (NaN and Infinity literals, surrogates)."""
    return json.dumps(document).encode("utf-8", "surrogatepass")


@st.composite
def ok_bodies(draw: st.DrawFn, style: str) -> bytes:
    """The body of a 2xx answer."""
    kind = draw(st.sampled_from(["mutated", "mutated", "table", "table", "valid", "odd",
                                 "any", "html", "empty", "echo"]))
    if kind == "valid":
        return lenient(template(style, draw(st.booleans()),
                                draw(st.sampled_from(['{"output": "yes"}', '{"output": "4"}',
                                                      '```json\n{"output": "No"}\n```']))))
    if kind == "mutated":
        document = template(style, draw(st.booleans()))
        return lenient(draw(mutate(document, odd_values)))
    if kind == "table":
        return lenient(draw(logprob_tables(style)))
    if kind == "odd":
        return draw(odd_json_documents)
    if kind == "any":
        return draw(json_bytes())
    if kind == "html":
        return b"<html><body><h1>502 Bad Gateway</h1>" + KEY.encode() + b"</body></html>"
    if kind == "echo":
        return lenient(template(style, False, draw(st.sampled_from(ECHOES))))
    return b""


def error_bodies() -> st.SearchStrategy[bytes]:
    """The body of an error answer: OpenAI-style, plain, HTML, empty or garbage."""
    messages = st.one_of(st.sampled_from(ECHOES), st.sampled_from(
        ["logprobs is not supported", "Rate limit reached", "\ud800", "x" * 5000]),
        json_values)
    return st.one_of(
        st.builds(lambda m: lenient({"error": {"message": m, "type": "x", "param": None}}),
                  messages),
        st.builds(lambda m: lenient({"error": m}), messages),
        st.just(b"<!DOCTYPE html><html><title>503</title><p>" + KEY.encode() + b"</p></html>"),
        st.just(b""), st.just(b"Internal Server Error"), odd_json_documents,
    )


STATUSES = [100, 101, 103, 199, 200, 201, 202, 204, 206, 299, 300, 301, 302, 304, 307, 399,
            400, 401, 403, 404, 405, 408, 409, 410, 413, 415, 422, 425, 429, 431, 451, 499,
            500, 501, 502, 503, 504, 507, 520, 529, 599, 600, 999]
RETRY_AFTER = [None, "0", "0.05", "1", "-5", "1e9", "inf", "-inf", "nan", "soon", "",
               "Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT",
               "Mon, 99 Foo 2015 99:99:99 GMT"]
CONTENT_TYPES = [None, "application/json", "application/json; charset=utf-8", "text/html",
                 "text/plain", "", "application/json; charset=utf-16",
                 "text/plain; charset=rot13", "application/json; charset=bogus",
                 "application/octet-stream"]


@st.composite
def answers(draw: st.DrawFn, style: str) -> Answer:
    """One answer of any kind."""
    kind = draw(st.sampled_from(["ok", "ok", "ok", "status", "status", "encoded", "wire"]))
    headers: list[tuple[str, str]] = []
    content_type = draw(st.sampled_from(CONTENT_TYPES))
    if content_type is not None:
        headers.append(("Content-Type", content_type))
    if kind == "status":
        status = draw(st.sampled_from(STATUSES))
        retry_after = draw(st.sampled_from(RETRY_AFTER))
        if retry_after is not None:
            headers.append(("Retry-After", retry_after))
        # A body after a status that has none is the start of the next response: on a
        # kept connection it would poison the answer to the next request.
        return Answer(http(status, draw(error_bodies()), tuple(headers)),
                      close=status < 200 or status in (204, 304))
    body = draw(ok_bodies(style))
    status = draw(st.sampled_from([200, 200, 200, 201, 203]))
    if kind == "encoded":
        encoding = draw(st.sampled_from(["gzip", "gzip", "deflate", "br", "identity",
                                         "gzip, gzip"]))
        body = draw(st.sampled_from([gzip.compress(body), zlib.compress(body), body[:10],
                                     gzip.compress(body)[:-4], gzip.compress(gzip.compress(body))]))
        return Answer(http(status, body, (*headers, ("Content-Encoding", encoding))))
    if kind == "wire":
        data = http(status, body, tuple(headers))
        fault = draw(st.sampled_from(["truncated_close", "truncated_open", "drip",
                                      "drip_forever", "no_length", "reset", "garbage",
                                      "informational"]))
        if fault == "truncated_close":
            return Answer(data[:draw(st.integers(0, len(data)))], close=True)
        if fault == "truncated_open":
            return Answer(http(status, body, tuple(headers), length=len(body) + 10))
        if fault == "drip":  # within the deadline
            return Answer(data, chunk=max(1, len(data) // 5), drip_s=0.01)
        if fault == "drip_forever":  # each piece within the timeout, the whole past it
            padded = http(status, body + b" " * 2000, tuple(headers))
            return Answer(padded, chunk=len(padded) // 20 + 1, drip_s=TIMEOUT_S / 2,
                          close=True)
        if fault == "no_length":  # the body ends where the connection does
            return Answer(http(status, body, tuple(headers), length=None), close=True)
        if fault == "reset":
            return Answer(b"", close=True)
        if fault == "garbage":
            return Answer(b"SPDY/9 banana\r\n\r\n" + body, close=True)
        return Answer(http(status, body, tuple(headers),
                           prefix=b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"))
    return Answer(http(status, body, tuple(headers)))


@dataclass(frozen=True)
class Case:
    """One example: the backend's flavour and answers, and the judge's configuration."""

    style: str
    answers: list[Answer]
    options: tuple[str, ...]
    logprobs: str
    on_missing_options: str
    max_retries: int
    circuit_failures: int
    rate_limit_retry: str = "until_deadline"


@st.composite
def cases(draw: st.DrawFn) -> Case:
    style = draw(st.sampled_from(STYLES))
    return Case(style=style, answers=draw(st.lists(answers(style), min_size=1, max_size=3)),
                options=draw(st.sampled_from([YES_NO, SCALE])),
                logprobs=draw(st.sampled_from(["auto", "auto", "always", "never"])),
                on_missing_options=draw(st.sampled_from(["error", "json"])),
                max_retries=draw(st.integers(0, 2)), circuit_failures=draw(st.integers(1, 3)),
                rate_limit_retry=draw(st.sampled_from(["until_deadline", "max_retries"])))


# --- the judge and its checks ------------------------------------------------------------


def make_judge(server: FakeLLM, case: Case, metrics: Metrics) -> OpenAIJudge:
    config = OpenAIJudgeConfig(
        base_url=server.url, model="judge-model", api=API[case.style], api_key=KEY,
        logprobs=case.logprobs, on_missing_options=case.on_missing_options,
        timeout_s=TIMEOUT_S, deadline_s=DEADLINE_S, max_retries=case.max_retries,
        backoff_base_s=0.001, backoff_max_s=0.01, circuit_failures=case.circuit_failures,
        circuit_reset_s=0.02, cache_size=0, top_logprobs=5,
        rate_limit_retry=case.rate_limit_retry)
    return OpenAIJudge("llm", config, metrics)


def question(options: tuple[str, ...], output: str = "I can't help with that.") -> JudgeRequest:
    return JudgeRequest(task="fuzz", instructions="Decide.", question="Which one?",
                        options=options, data=(("output", output),))


def healthy(options: tuple[str, ...]) -> dict[str, Any]:
    """How a healthy provider answers questions over ``options``."""
    if options == YES_NO:
        return {"text": '{"output": "yes"}', "distribution": {"Yes": 0.8, " no": 0.2}}
    return {"text": '{"output": "4"}', "distribution": {"4": 0.6, " 5": 0.3, "2": 0.1}}


def check_judgement(probabilities: dict[str, float], options: tuple[str, ...]) -> None:
    assert set(probabilities) == set(options), probabilities
    assert all(math.isfinite(p) and 0.0 <= p <= 1.0 for p in probabilities.values()), \
        probabilities
    assert math.isclose(sum(probabilities.values()), 1.0, abs_tol=1e-9), probabilities


def expected_retryable(status: int) -> bool | None:
    """Whether an HTTP error status is worth retrying (None: not an error status)."""
    if 400 <= status < 500:
        return status in RETRYABLE_4XX
    if status >= 500:
        return True
    return None


def check_error(error: JudgeError) -> None:
    message = str(error)
    assert KEY not in message, message
    # Not even most of it (a message cut at the key's middle).
    assert KEY[:12] not in message, message
    if error.status is not None and (wanted := expected_retryable(error.status)) is not None:
        assert error.retryable is wanted, (error.status, message)


def check_breaker(judge: OpenAIJudge, metrics: Metrics) -> None:
    breaker = judge._breaker  # private: the invariants are not all public
    assert not breaker._probing, "a probe was left taken"
    assert metrics.registry.get_sample_value(
        "evalstream_judge_circuit_state", {"judge": "llm"}) == int(breaker.state)
    if breaker.state is CircuitState.CLOSED:
        assert breaker._consecutive < breaker.failures
    assert metrics.registry.get_sample_value(
        "evalstream_judge_in_flight_requests", {"judge": "llm"}) == 0


async def ask(judge: OpenAIJudge, options: tuple[str, ...]) -> tuple[Any, float]:
    """(Judgement or JudgeError, seconds taken); any other exception propagates."""
    start = time.perf_counter()
    try:
        outcome: Any = await judge.judge(question(options))
    except JudgeError as exc:
        outcome = exc
    return outcome, time.perf_counter() - start


async def run_case(case: Case) -> tuple[Any, float, WireLLM]:
    metrics = Metrics()
    async with serving(WireLLM(style=case.style, answers=list(case.answers),
                               **healthy(case.options))) as server:
        judge = make_judge(server, case, metrics)
        try:
            outcome, took = await ask(judge, case.options)
            server.rate_limited = int(metrics.registry.get_sample_value(
                "evalstream_judge_requests_total", {"judge": "llm", "outcome": "rate_limited"})
                or 0)
            check_breaker(judge, metrics)
            # The backend recovers: the judge answers again (the breaker, the logprobs
            # mode and the connection pool were not left broken).
            server.answers.clear()
            after, _ = await ask(judge, case.options)
            assert not isinstance(after, BaseException), after
            check_judgement(dict(after.probabilities), case.options)
            check_breaker(judge, metrics)
            assert judge.circuit_state is CircuitState.CLOSED
        finally:
            await judge.aclose()
    return outcome, took, server


def check_outcome(case: Case, outcome: Any, took: float, server: WireLLM) -> None:
    assert took < DEADLINE_S + MARGIN_S, took
    if isinstance(outcome, JudgeError):
        check_error(outcome)
        if isinstance(outcome, JudgeUnavailableError):
            assert took >= DEADLINE_S * 0.9, took
    else:
        check_judgement(dict(outcome.probabilities), case.options)
    # Bounded work: each of the (at most two) logical requests tries max_retries + 1 times;
    # until its deadline when rate limited (until_deadline), those attempts spend none.
    exempt = server.rate_limited if case.rate_limit_retry == "until_deadline" else 0
    assert server.sent <= 2 * (case.max_retries + 1) + exempt, (server.sent, exempt)


@FUZZ
@given(case=cases())
def test_any_backend_answer_is_a_judgement_or_a_judge_error(case: Case) -> None:
    outcome, took, server = asyncio.run(run_case(case))
    check_outcome(case, outcome, took, server)


# --- through an evaluator and the pipeline: every result is publishable ----------------

PIPELINE_SETTINGS = Settings.model_validate({
    "routes": [{"name": "r", "evaluators": [
        {"evaluator": "refusal", "judge": "llm", "reasons": "always"},
        {"evaluator": "scorer", "judge": "llm",
         "params": {"rubric": "How helpful is the answer, 1 to 5?"}},
        # Escalated every time (no builtin answer is that confident): the LLM's failures
        # pass through the cascade too.
        {"evaluator": "refusal", "name": "refusal_cascade", "judge": "cascade"}]}],
    "judges": {"llm": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
               "cascade": {"type": "cascade", "first": "builtin", "then": "llm",
                           "min_confidence": 1.0}},
})


async def run_pipeline(case: Case) -> list[EvalResult]:
    async with serving(WireLLM(style=case.style, answers=list(case.answers),
                               **healthy(case.options))) as server:
        judge = make_judge(server, case, Metrics())
        metrics = Metrics()
        cascade = CascadeJudge("cascade", BuiltinJudge(), judge, 1.0, metrics)
        pipeline = Pipeline(PIPELINE_SETTINGS, {"llm": judge, "cascade": cascade}, metrics)
        try:
            return await pipeline.evaluate(
                TraceEvent(event_id="e", input="Where is my order?",
                           output="I can't help with that."), topic="t")
        finally:
            await pipeline.aclose()
            await judge.aclose()


@settings(FUZZ, max_examples=30)
@given(case=cases())
def test_any_backend_answer_makes_publishable_results(case: Case) -> None:
    results = asyncio.run(run_pipeline(case))
    assert {r.evaluator for r in results} == {"refusal", "scorer", "refusal_cascade"}
    for result in results:
        wire = check_wire(result)  # serialises, and matches the committed schema
        assert KEY.encode() not in wire
        if result.status == "error":
            # A judge failure, never an evaluator crash ("TypeError: ...").
            assert (result.error or "").startswith("judge:"), result.error


@pytest.mark.parametrize("message", ["\ud800", "half an emoji \ud83d", "\udfff\ud800"])
async def test_an_error_message_with_a_lone_surrogate_makes_a_publishable_result(
        message: str) -> None:
    """A server's error message with a "\\ud800" escape was quoted as it is: the error
    result could not be serialised."""
    body = lenient({"error": {"message": message}})
    case = Case("openai_chat", [Answer(http(503, body, JSON))], YES_NO, "never", "error",
                0, 5)
    results = await run_pipeline(case)
    assert [r.status for r in results] == ["error"] * 3
    for result in results:
        check_wire(result)
        assert "HTTP 503" in (result.error or "")


# --- pinned: every status class, Retry-After, wire faults --------------------------------


def status_case(status: int, body: bytes = b'{"error": {"message": "m"}}',
                headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),),
                max_retries: int = 1, rate_limit_retry: str = "max_retries") -> Case:
    """One status, answered again and again. 429 counts against max_retries here unless
    asked otherwise, so that every retryable status is tried the same number of times."""
    answer = Answer(http(status, body, headers), close=status < 200 or status in (204, 304))
    return Case("openai_chat", [answer], YES_NO, "never", "error", max_retries, 5,
                rate_limit_retry)


@pytest.mark.parametrize("status", [s for s in STATUSES if s >= 300])
async def test_every_error_status_is_classified_by_its_semantics(status: int) -> None:
    """4xx: non-retryable but 408/409/425/429; 5xx (and beyond): retryable; 3xx (not
    followed): non-retryable. A retryable one is tried max_retries + 1 times, the others
    once. 409 and 425 were not retried."""
    case = status_case(status)
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.status == status
    wanted = expected_retryable(status)
    assert outcome.retryable is bool(wanted)
    assert server.sent == (2 if wanted else 1)
    check_outcome(case, outcome, took, server)


async def test_a_429_is_retried_until_the_deadline_by_default() -> None:
    """With rate_limit_retry: until_deadline a 429 spends no retry: max_retries 1, yet it is
    sent until the deadline ends it, as an unavailable judge naming the 429."""
    case = status_case(429, headers=(("Content-Type", "application/json"),
                                     ("Retry-After", "0.05")),
                       rate_limit_retry="until_deadline")
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeUnavailableError), outcome
    assert "HTTP 429" in str(outcome)
    assert server.rate_limited > 2
    # Each one sent was answered with the 429, and counted, but the last when the deadline
    # ends it on the wire: sent, not yet counted.
    assert server.rate_limited <= server.sent <= server.rate_limited + 1
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("status", [100, 101, 103, 199])
async def test_an_informational_status_without_a_final_one_is_a_transport_error(
        status: int) -> None:
    case = status_case(status)
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.retryable
    assert outcome.status is None
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("content_type", [
    "text/plain; charset=rot13", "text/plain; charset=utf-16", "text/html; charset=hex",
    "text/plain; charset=bogus"])
async def test_a_400_in_a_charset_python_cannot_decode_is_a_judge_error(
        content_type: str) -> None:
    """A plain-text 400 is searched for the logprobs parameters: decoding it with the
    server's charset raised TypeError (rot13) or UnicodeError (utf-16 without a BOM)."""
    case = status_case(400, b"Bad request: unknown logprobs\xff",
                       (("Content-Type", content_type),))
    case = Case(case.style, case.answers, YES_NO, "always", "error", 1, 5)
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.status == 400
    assert not outcome.retryable
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize(("retry_after", "waits"), [
    ("0", False), ("-5", False), ("nan", False), ("soon", False), ("", False),
    ("Wed, 21 Oct 2015 07:28:00 GMT", False), ("Mon, 99 Foo 2015 99:99:99 GMT", False),
    ("1e9", True), ("inf", True), ("Fri, 31 Dec 9999 23:59:59 GMT", True)])
@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_is_honoured_within_the_deadline(status: int, retry_after: str,
                                                           waits: bool) -> None:
    case = status_case(status, headers=(("Retry-After", retry_after),))
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeUnavailableError if waits else JudgeError), outcome
    assert outcome.retryable is not waits  # the deadline error is final
    # A huge Retry-After waits (the deadline ends it); a bad or past one does not.
    assert server.sent == (1 if waits else 2)
    assert (took >= DEADLINE_S * 0.9) is waits, took
    check_outcome(case, outcome, took, server)


def body_case(answer: Answer, max_retries: int = 0) -> Case:
    return Case("openai_chat", [answer], YES_NO, "auto", "error", max_retries, 5)


VALID = lenient(template("openai_chat", True))
JSON = (("Content-Type", "application/json"),)


async def test_a_body_dripped_past_the_timeout_is_a_retryable_timeout() -> None:
    # Each piece comes within httpx's read timeout, but the exchange as a whole is bounded
    # by timeout_s: it ends as a retryable error (one the breaker counts), not only at the
    # deadline, after a single attempt.
    padded = http(200, VALID + b" " * 4000, JSON)
    case = body_case(Answer(padded, chunk=len(padded) // 40 + 1, drip_s=TIMEOUT_S / 2,
                            close=True))
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert not isinstance(outcome, JudgeUnavailableError), outcome
    assert outcome.retryable
    assert took < DEADLINE_S * 0.9, took
    check_outcome(case, outcome, took, server)


async def test_a_body_dripped_within_the_deadline_is_read() -> None:
    data = http(200, VALID, JSON)
    case = body_case(Answer(data, chunk=len(data) // 5 + 1, drip_s=0.02))
    outcome, took, server = await run_case(case)
    assert outcome.p("yes") == pytest.approx(0.55 / 0.8), outcome
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("answer", [
    Answer(http(200, VALID, JSON)[:-20], close=True),  # connection closed mid-body
    Answer(http(200, VALID, JSON, length=len(VALID) + 5)),  # mid-body, kept open
    Answer(b"", close=True),  # closed before any answer
    Answer(http(200, b"not gzip", (*JSON, ("Content-Encoding", "gzip")))),
    Answer(http(200, gzip.compress(VALID)[:100], (*JSON, ("Content-Encoding", "gzip")))),
], ids=["closed_mid_body", "stalled_mid_body", "closed", "invalid_gzip", "truncated_gzip"])
async def test_a_broken_body_is_a_retryable_judge_error(answer: Answer) -> None:
    case = body_case(answer, max_retries=1)
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.retryable
    assert server.sent == 2
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("status", [400, 401, 503])
async def test_an_error_status_with_a_corrupt_body_keeps_its_status(status: int) -> None:
    """httpx raised DecodingError reading the body: a 400 became a retried transport
    error, and a 503's Retry-After was lost."""
    case = status_case(status, b"not gzip", (*JSON, ("Content-Encoding", "gzip"),
                                             ("Retry-After", "0")))
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.status == status
    assert outcome.retryable is (status == 503)
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "gzip, gzip"])
async def test_a_compressed_body_is_read(encoding: str) -> None:
    body = {"gzip": gzip.compress(VALID), "deflate": zlib.compress(VALID),
            "gzip, gzip": gzip.compress(gzip.compress(VALID))}[encoding]
    case = body_case(Answer(http(200, body, (*JSON, ("Content-Encoding", encoding)))))
    outcome, took, server = await run_case(case)
    assert outcome.p("yes") == pytest.approx(0.55 / 0.8), outcome
    check_outcome(case, outcome, took, server)


async def peak_memory(case: Case) -> tuple[Any, float, WireLLM, int]:
    """``run_case`` and the most memory Python held meanwhile (bytes)."""
    tracemalloc.start()
    try:
        outcome, took, server = await run_case(case)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return outcome, took, server, peak


BIG = 50_000_000
#: 1 MB pieces: the server holds little of the body at once, the peak is the client's.
MB = 1 << 20


@pytest.mark.parametrize("body", [
    VALID[:-1] + b', "pad": "' + b"x" * BIG + b'"}',  # valid JSON
    VALID + b" " * BIG,  # valid JSON too: trailing whitespace
], ids=["padded_field", "trailing_space"])
async def test_a_50_mb_body_is_refused_without_being_held(body: bytes) -> None:
    """httpx read any body whole (this one peaked at ~150 MB) and answered from it."""
    # One attempt: reading 16 MB twice under tracemalloc took ~0.56 s of the 0.6 s deadline,
    # so the deadline sometimes ended the call first (a JudgeUnavailableError, not retryable).
    case = body_case(Answer(http(200, body, JSON), chunk=MB), max_retries=0)
    outcome, took, server, peak = await peak_memory(case)
    assert isinstance(outcome, JudgeError), outcome
    assert "more than" in str(outcome)
    assert outcome.retryable
    assert peak < 3 * MAX_BODY_BYTES, peak
    check_outcome(case, outcome, took, server)


async def test_a_50_mb_error_page_is_cut_short() -> None:
    case = body_case(Answer(http(500, b"<html>" + b"x" * BIG, (("Content-Type", "text/html"),)),
                            chunk=MB, close=True), max_retries=1)
    outcome, took, server, peak = await peak_memory(case)
    assert isinstance(outcome, JudgeError), outcome
    assert outcome.status == 500
    assert peak < MAX_BODY_BYTES, peak
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("layers", [1, 2], ids=["gzip", "gzip_gzip"])
async def test_a_gzip_bomb_is_refused_without_being_inflated(layers: int) -> None:
    """A 49 KB gzip body inflated to 50 MB (peak ~150 MB); gzipped twice, a body of a
    few KB inflates past what the limit checks on the wire."""
    body = VALID + b" " * (BIG * layers)
    for _ in range(layers):
        body = gzip.compress(body)
    encoding = ", ".join(["gzip"] * layers)
    case = body_case(Answer(http(200, body, (*JSON, ("Content-Encoding", encoding)))))
    outcome, took, server, peak = await peak_memory(case)
    assert isinstance(outcome, JudgeError), outcome
    assert "more than" in str(outcome)
    assert peak < 3 * MAX_BODY_BYTES, peak
    check_outcome(case, outcome, took, server)


async def test_a_large_body_under_the_limit_is_read() -> None:
    big = VALID[:-1] + b', "pad": "' + b"x" * (MAX_BODY_BYTES // 2) + b'"}'
    case = body_case(Answer(http(200, gzip.compress(big),
                                 (*JSON, ("Content-Encoding", "gzip")))))
    outcome, took, server = await run_case(case)
    assert outcome.p("yes") == pytest.approx(0.55 / 0.8), outcome
    # Only the codings the bounded reader decodes are asked for.
    assert {r.headers.get("accept-encoding") for r in server.posts} == {"gzip, deflate"}
    check_outcome(case, outcome, took, server)


# --- pinned: a key echoed by the server, corrupt token counts ----------------------------


@pytest.mark.parametrize("style", ["openai_chat", "openai_completions", "llamacpp_native"])
async def test_a_key_echoed_in_the_answer_is_not_in_the_error(style: str) -> None:
    """The JSON answer's text is quoted in the "not one of the options" error: a server
    echoing the key there (a debugging proxy, a wrong base_url) put it in the message."""
    body = lenient(template(style, False, f'{{"output": "{KEY}"}}'))
    case = Case(style, [Answer(http(200, body, JSON))], YES_NO, "never", "error", 0, 5)
    outcome, took, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert "not one of" in str(outcome)
    check_outcome(case, outcome, took, server)


async def test_a_key_echoed_as_a_token_is_not_in_the_error() -> None:
    """Top tokens are quoted (cut to 12 characters) when no option is among them."""
    body = template("openai_chat", True)
    top = [{"token": t, "logprob": -0.5} for t in ("sk-1234", KEY)]
    body["choices"][0]["logprobs"]["content"] = [{"token": KEY, "logprob": -0.5,
                                                  "top_logprobs": top}]
    case = Case("openai_chat", [Answer(http(200, lenient(body), JSON))], YES_NO, "always",
                "error", 0, 5)
    metrics = Metrics()
    async with serving(WireLLM(style=case.style, answers=list(case.answers))) as server:
        config = make_judge(server, case, metrics).config.model_copy(
            update={"api_key": SecretStr("sk-1234")})
        judge = OpenAIJudge("llm", config, metrics)
        with pytest.raises(JudgeError, match="top tokens") as info:
            await judge.judge(question(YES_NO))
        await judge.aclose()
    assert "sk-1234" not in str(info.value)


async def test_a_key_echoed_in_a_generation_is_scrubbed() -> None:
    """A generated text (a result's reason) quoting the key would publish it."""
    async with serving(WireLLM(text=f"Your key is {KEY}.")) as server:
        judge = make_judge(server, status_case(200), Metrics())
        generation = await judge.generate(GenerateRequest(task="reason", instructions="x"))
        await judge.aclose()
    assert KEY not in generation.text
    assert generation.text == "Your key is ***."


@pytest.mark.parametrize("counts", [
    {"tokens_evaluated": 1e308, "tokens_predicted": 1e308},
    {"tokens_evaluated": 10**400, "tokens_predicted": 1}])
async def test_absurd_token_counts_are_ignored(counts: dict[str, Any]) -> None:
    """Two 1e308 counts summed over a call, then priced, overflowed a float: judge()
    raised OverflowError."""
    body = {**template("llamacpp_native", False), **counts}
    case = Case("llamacpp_native", [Answer(http(200, lenient(body), JSON))], YES_NO, "never",
                "error", 0, 5)
    outcome, took, server = await run_case(case)
    assert outcome.p("yes") == 1.0, outcome
    assert outcome.info.tokens_in == 0
    check_outcome(case, outcome, took, server)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_says_to_check_base_url(status: int) -> None:
    case = status_case(status)
    outcome, _, server = await run_case(case)
    assert isinstance(outcome, JudgeError), outcome
    assert not outcome.retryable
    assert server.sent == 1
    assert "redirect not followed: check base_url" in str(outcome)
