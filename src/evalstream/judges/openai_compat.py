"""The LLM judge for any OpenAI-compatible endpoint (OpenAI, Azure, vLLM, llama.cpp, ...).

All requests of a judge share its HTTP connections (``http_pool.ShardedClients``). A
closed question is one request with ``max_tokens`` 1, ``temperature`` 0 and top logprobs;
the answer is the first token's distribution over the options (``logprobs.py``). Without
logprobs the judge asks for a strict JSON answer.

Every request goes through the same path (``openai_send.RequestSender.send``): the
judge-wide pause after rate limiting (waits while paused; a 429 is retried until the
deadline with ``rate_limit_retry: until_deadline``, but for ``insufficient_quota``, which
fails at once), circuit breaker (waits while open),
rate limits (token buckets), a concurrency slot
(``max_concurrency``), the HTTP call, classification of the outcome (the backend decides
what is retryable: ``should_retry``), jittered backoff honouring ``Retry-After``. The
caller's deadline (``deadline_s``) bounds all of it and turns into
``JudgeUnavailableError``, which the pipeline publishes as ``status: error``.

Spend cap (``spend_cap_usd``): every answered HTTP request adds its cost, from the token
usage the endpoint reports and the configured prices (``RequestSender.cost``, the same
formula as the ``evalstream_judge_cost_usd_total`` metric), to a rolling window
(``spend.SpendWindow``).
Before each request is sent, a window at or over the cap raises ``JudgeSpendCapError``
and nothing is sent; cache hits still answer, they cost nothing. Requests already in
flight when the cap is reached still complete and count, so the window may overshoot the
cap by at most the cost of those in-flight requests (at most ``max_concurrency`` of them:
the cap is checked again once a request holds its connection slot). With
``on_spend_cap: wait`` the request waits instead (``spend.SpendCapWait``, caught in
``_cached`` outside the deadline) until the oldest spend leaves the window, then starts
again with a fresh deadline. A stop or a revoke cancels that wait, and the request's other
waits before it is sent (``stop_waiting``; ``waits.StoppableWaits``).

The API key lives only in the client's default headers: it is never logged, never put in
an exception message (messages are also scrubbed of it, in case a server echoes it). So
are the other credentials a judge may be given (``masked_dump`` hides them all): the
password in the ``base_url`` (and the Basic token made of it), and header and query values.

The wire format itself (payloads per endpoint flavour, reading response and error bodies)
lives in ``openai_wire.py``, sending it in ``openai_send.py``; this module asks the
questions and reads the answers, with the cache and the deadline.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from evalstream.config.judges import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeUnavailableError
from evalstream.events import JudgeInfo, ProbabilitySource, load_json
from evalstream.judges.answers import parse_json_answer, unfence
from evalstream.judges.base import (
    GenerateRequest,
    Generation,
    Judge,
    Judgement,
    JudgeRequest,
    own_copy,
    with_judge_info,
)
from evalstream.judges.cache import TTLCache
from evalstream.judges.logprobs import (
    MissingLogprobsError,
    OptionsNotFoundError,
    first_token_distinguishable,
    first_token_distribution,
    option_probabilities,
)
from evalstream.judges.openai_send import RequestSender
from evalstream.judges.openai_wire import (
    LogprobsRejectedError,
    Usage,
    build_payload,
    reading_response,
    response_text,
)
from evalstream.judges.prompt import generate_messages, judge_messages
from evalstream.judges.registry import judge_backend
from evalstream.judges.resilience import CircuitState
from evalstream.judges.scrub import Scrubber
from evalstream.judges.spend import SpendCap, SpendCapWait, SpendWindow
from evalstream.judges.waits import StoppableWaits
from evalstream.logging import get_logger
from evalstream.metrics import Metrics

__all__ = ["OpenAIJudge"]

_log = get_logger("evalstream.judges.openai")
# In auto mode, logprobs are switched off after this many consecutive responses without
# them: one such response can be that request's fate (an output content filter answers
# "logprobs": null), while a backend without logprobs support shows it on every request,
# so a short run is a reliable signal that costs at most two extra fallbacks.
_MISSING_LOGPROBS_TO_DISABLE = 3


@dataclass(frozen=True, slots=True)
class _Answer:
    probabilities: Mapping[str, float]
    usage: Usage
    text: str = ""
    value: Any = None
    #: How ``probabilities`` were given (None for generated text).
    source: ProbabilitySource | None = None


def _request_key(*parts: Any) -> str:
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.blake2b(blob.encode(), digest_size=16).hexdigest()


class OpenAIJudge(Judge):
    """A judge backed by an OpenAI-compatible HTTP endpoint.

    Args:
        name: The configured name (metrics label, results).
        config: Endpoint, limits, prices and spend cap.
        metrics: The worker's metrics container.
        clock: Monotonic seconds for the spend cap's window; injected by tests.
        sleep: How a wait for the spend cap's window sleeps; injected by tests.
    """

    def __init__(self, name: str, config: OpenAIJudgeConfig, metrics: Metrics,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.name = name
        self.config = config
        self._metrics = metrics
        secret = config.api_key.get_secret_value() if config.api_key else None
        self._redact = Scrubber(config, secret)
        # Kept with or without a cap: the gauge then shows the spend a cap would see.
        window = SpendWindow(config.spend_cap_window_s, clock=clock)
        metrics.judge_spend_window.labels(name).set_function(window.total)
        # Every wait of a request before it is sent, for stop_waiting to cancel.
        waits = StoppableWaits()
        spend = SpendCap(name, config.spend_cap_usd, window,
                         metrics.judge_requests.labels(name, "capped").inc,
                         wait=config.on_spend_cap == "wait", sleep=sleep, waits=waits)
        metrics.judge_spend_cap_waiting.labels(name).set_function(lambda: spend.waiting)
        self._spend = spend
        self._waits = waits
        self._sender = RequestSender(name, config, metrics, self._redact, spend,
                                     self.should_retry, waits)
        self._host = self._sender.host
        self._breaker = self._sender.breaker
        self._cache: TTLCache[_Answer] = TTLCache(config.cache_size, config.cache_ttl_s)
        # Both series bound from the start, so rate() sees 0 before the first answer.
        self._answers = {source: metrics.judge_answers.labels(name, source)
                         for source in ("logprobs", "json")}
        self._use_logprobs = config.logprobs != "never"
        # Consecutive logprob responses that came without logprobs (auto mode).
        self._missing_logprobs = 0
        # Option set -> whether its first generated token tells the options apart (option
        # sets come from the configuration, so this stays small).
        self._readable: dict[tuple[str, ...], bool] = {}

    # --- public API -------------------------------------------------------------------

    @property
    def circuit_state(self) -> CircuitState:
        """The breaker's state (closed / half-open / open)."""
        return self._breaker.state

    async def judge(self, request: JudgeRequest) -> Judgement:
        """Ask the closed question; a probability per option.

        Raises:
            JudgeError: a non-retryable failure, retries exhausted, or an unusable answer.
            JudgeUnavailableError: no answer before ``deadline_s``.
        """
        key = _request_key("judge", self.config.model, self.config.api, request.task,
                           request.instructions, request.question, request.options,
                           request.data)
        answer, hit, latency = await self._cached(key, lambda u: self._judge(request, u))
        if not hit and answer.source is not None:
            self._answers[answer.source].inc()
        return Judgement(probabilities=dict(answer.probabilities),
                         info=self._info(answer.usage, latency, hit, answer.source))

    async def generate(self, request: GenerateRequest) -> Generation:
        """A short text (or strictly parsed JSON when ``json_schema_hint`` is set)."""
        key = _request_key("generate", self.config.model, self.config.api, request.task,
                           request.instructions, request.data, request.max_tokens,
                           request.json_schema_hint)
        answer, hit, latency = await self._cached(key, lambda u: self._generate(request, u))
        return Generation(text=answer.text, info=self._info(answer.usage, latency, hit),
                          value=answer.value)

    def should_retry(self, error: JudgeError) -> bool:
        """Whether a failed attempt is worth retrying (408/409/425/429, 5xx, timeouts, resets)."""
        return error.retryable

    def stop_waiting(self, scopes: Collection[Hashable] | None = None) -> None:
        """Cancel the requests waiting before they are sent (at the spend cap with
        ``on_spend_cap: wait``, the rate-limit pause, the circuit breaker, a token bucket,
        a connection slot, a backoff): all, or those of ``scopes`` (see
        ``Judge.stop_waiting``)."""
        self._waits.stop(scopes)

    async def aclose(self) -> None:
        """Close the HTTP clients (their pooled connections)."""
        await self._sender.aclose()

    # --- caching and deadline ---------------------------------------------------------

    async def _cached(self, key: str, compute: Callable[[Usage], Awaitable[_Answer]]
                      ) -> tuple[_Answer, bool, float]:
        """(answer, cache hit, latency in ms): cached, else ``compute``, within the deadline."""
        usage = Usage()
        ran = False

        def computed() -> Awaitable[_Answer]:
            nonlocal ran
            ran = True  # this call sends its own requests (not another's in-flight answer)
            return compute(usage)

        start = time.perf_counter()
        try:
            while True:
                # Per attempt: after a spend-cap wait this call may join another's request
                # in flight, whose exception object is then that call's, not this one's.
                ran = False
                try:
                    async with asyncio.timeout(self.config.deadline_s):
                        answer, hit = await self._cache.get_or_compute(key, computed)
                    break
                except SpendCapWait:
                    # on_spend_cap: wait, and nothing was sent for it. Waited for outside
                    # the deadline: the wait is for budget, not for an unhealthy backend,
                    # and its end is known; the deadline (and the retries) start afresh
                    # after it.
                    await self._spend.wait_for_room()
                    start = time.perf_counter()  # the latency is the judge's, not the wait
                except TimeoutError:
                    self._metrics.judge_requests.labels(self.name, "deadline").inc()
                    last = f"; last error: {usage.last_error}" if usage.last_error else ""
                    raise JudgeUnavailableError(self._redact(
                        f"judge {self.name!r}: no answer within the "
                        f"{self.config.deadline_s:g}s deadline after {usage.requests} "
                        f"request(s){last}")) from None
        except JudgeError as exc:
            latency = (time.perf_counter() - start) * 1000.0
            if ran:
                with_judge_info(exc, self._info(usage, latency, hit=False))
                raise
            # It waited on another call's identical request, which failed: the cache hands
            # every waiter that call's exception object, which carries that call's spend.
            # This call gets an exception (and info) of its own: what its own attempts
            # before a spend-cap wait sent (``usage``), else nothing.
            raise own_copy(exc, self._info(usage, latency, hit=False)) from exc
        if hit:
            self._metrics.judge_cache_hits.labels(self.name).inc()
        return answer, hit, (time.perf_counter() - start) * 1000.0

    def _info(self, usage: Usage, latency_ms: float, hit: bool,
              source: ProbabilitySource | None = None) -> JudgeInfo:
        if hit:
            return JudgeInfo(backend="openai", model=self.config.model, latency_ms=latency_ms,
                             cached=True, probabilities_from=source)
        return JudgeInfo(backend="openai", model=self.config.model, latency_ms=latency_ms,
                         requests=usage.requests, tokens_in=usage.tokens_in,
                         tokens_out=usage.tokens_out,
                         cost_usd=self._sender.cost(usage.tokens_in, usage.tokens_out),
                         probabilities_from=source)

    # --- question answering -----------------------------------------------------------

    def _first_token_readable(self, options: tuple[str, ...]) -> bool:
        """Whether logprobs can answer over ``options``; decided once per option set."""
        readable = self._readable.get(options)
        if readable is None:
            readable = self._readable[options] = first_token_distinguishable(options)
            if not readable:
                # Options come from the configuration (labels, topics), not from traces.
                _log.warning("judge_options_not_first_token", judge=self.name,
                             options=list(options), answer="json")
        return readable

    async def _judge(self, request: JudgeRequest, usage: Usage) -> _Answer:
        if self._use_logprobs and self._first_token_readable(request.options):
            messages = judge_messages(request, json_answer=False)
            try:
                body = await self._sender.send(self._payload(messages, max_tokens=1, logprobs=True),
                                        usage)
            except LogprobsRejectedError as exc:
                # The endpoint rejects the logprobs parameters themselves (its 400 names
                # them): in auto mode that means "no logprobs here", not a broken judge.
                if self.config.logprobs != "auto":
                    raise
                self._use_logprobs = False
                _log.warning("judge_logprobs_rejected", judge=self.name, status=exc.status)
                return await self._judge_json(request, usage)
            try:
                with reading_response("logprobs", judge=self.name, host=self._host):
                    # Tokens are quoted in the "options not found" error, cut short:
                    # scrubbed first, a key a server echoes as a token never shows.
                    dist = {self._redact(token): p
                            for token, p in first_token_distribution(body).items()}
                    answer = _Answer(option_probabilities(
                        dist, request.options, min_mass=self.config.min_option_mass), usage,
                                     source="logprobs")
            except MissingLogprobsError as exc:
                if self.config.logprobs == "always":
                    raise JudgeError(f"judge {self.name!r} returned no logprobs ({exc}); set "
                                     f"logprobs: auto or never for this backend") from None
                # auto: one response without logprobs may be that request's own fate (an
                # output content filter answers with "logprobs": null); only a run of them
                # says the backend does not do logprobs.
                self._missing_logprobs += 1
                if self._missing_logprobs >= _MISSING_LOGPROBS_TO_DISABLE:
                    self._use_logprobs = False
                    _log.warning("judge_logprobs_unavailable", judge=self.name,
                                 detail=str(exc), responses=self._missing_logprobs)
            except OptionsNotFoundError as exc:
                self._missing_logprobs = 0  # logprobs came, just not our options
                if self.config.on_missing_options != "json":
                    # Says what to do: the setting that asks again, for a JSON answer.
                    raise JudgeError(f"judge {self.name!r}: {exc}; set on_missing_options: "
                                     f"json to ask for a JSON answer instead") from None
            else:
                self._missing_logprobs = 0
                return answer
        return await self._judge_json(request, usage)

    async def _judge_json(self, request: JudgeRequest, usage: Usage) -> _Answer:
        messages = judge_messages(request, json_answer=True)
        body = await self._sender.send(
            self._payload(messages, max_tokens=self.config.json_max_tokens, logprobs=False),
            usage)
        with reading_response("answer", judge=self.name, host=self._host):
            option = parse_json_answer(self._content(body), request.options)
        return _Answer({o: 1.0 if o == option else 0.0 for o in request.options}, usage,
                       source="json")

    async def _generate(self, request: GenerateRequest, usage: Usage) -> _Answer:
        messages = generate_messages(request)
        body = await self._sender.send(
            self._payload(messages, max_tokens=request.max_tokens, logprobs=False), usage)
        text = self._content(body).strip()
        value: Any = None
        if request.json_schema_hint:
            try:
                # orjson, not json: a "\\ud83d" escape in the answer (a model's text cut
                # inside an emoji) or NaN is rejected here, not carried into a result that
                # then cannot be serialised.
                value = load_json(unfence(text))
            except (ValueError, RecursionError):
                raise JudgeError(f"judge {self.name!r}: {request.task} answer is not valid "
                                 f"JSON ({len(text)} chars)") from None
        return _Answer({}, usage, text=text, value=value)

    def _payload(self, messages: list[dict[str, str]], *, max_tokens: int,
                 logprobs: bool) -> dict[str, Any]:
        return build_payload(self.config.api, self.config.model, messages,
                             max_tokens=max_tokens, logprobs=logprobs,
                             top_logprobs=self.config.top_logprobs)

    def _content(self, body: Any) -> str:
        # A server may echo the key in its answer (a debugging proxy, a wrong base_url):
        # scrubbed here, it reaches neither an error message nor a result's reason.
        return self._redact(response_text(body, self.config.api, judge=self.name))


@judge_backend("openai")
def _make_openai(name: str, config: Any, metrics: Metrics,
                 built: Mapping[str, Judge]) -> Judge:
    del built
    if not isinstance(config, OpenAIJudgeConfig):  # pragma: no cover - registry guarantees
        raise TypeError(f"judges.{name}: expected an openai config")
    return OpenAIJudge(name, config, metrics)
