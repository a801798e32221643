"""One logical request to an OpenAI-compatible endpoint: limits, breaker and retries.

Every request of an ``OpenAIJudge`` goes through :meth:`RequestSender.send`: the spend cap
(refuses before anything is sent), the judge-wide rate-limit pause (waits while
paused), the circuit breaker (waits while open), rate limits (token buckets), a
concurrency slot (``max_concurrency``), the HTTP call, classification of the outcome
(``openai_wire.classify_response``; the judge's ``should_retry`` decides what is
retried), jittered backoff honouring ``Retry-After``. It accounts what each answered
request cost (tokens, USD) to the metrics and the spend window. The caller's deadline
(``asyncio.timeout`` around ``send``) bounds all of it.

Rate limiting (HTTP 429) is the server asking for less, not a failure: with
``rate_limit_retry: until_deadline`` a 429 is retried until the deadline, whatever
``max_retries`` says (it spends none of them), so a rate-limited period is waited out
and becomes consumer lag. And one 429 speaks for the whole judge: its ``Retry-After``
(at most ``backoff_max_s``), or a backoff once 429s come in a row without one, pauses
every request of the judge (``resilience.PauseGate``), instead of each request finding
out with a 429 of its own. A 429 whose error is ``insufficient_quota`` is the exception:
the account is out of credit, which no wait brings back, so it fails its request at once
and pauses nothing (``openai_wire.QuotaExhaustedError``).

A request that waits before it is sent (at the pause, the breaker, a token bucket, for a
connection slot, or in its backoff before a retry) holds that wait in the judge's
``waits.StoppableWaits``: a stop or a revoke of its partition cancels it, and its
evaluation is redelivered, rather than the drain or the revoke waiting for it up to its
deadline.

The API key lives only in the HTTP clients' default headers, and every error message is
scrubbed of the judge's credentials (``scrub.Scrubber``) before it leaves.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import httpx

from evalstream.config.judges import OpenAIJudgeConfig
from evalstream.errors import JudgeError
from evalstream.judges.http_pool import BodyTooLargeError, ShardedClients, post_bounded
from evalstream.judges.openai_wire import PATHS, Usage, classify_response, read_tokens
from evalstream.judges.resilience import (
    CircuitBreaker,
    PauseGate,
    TokenBucket,
    backoff_delay,
)
from evalstream.judges.scrub import Scrubber
from evalstream.judges.spend import SpendCap
from evalstream.judges.waits import StoppableWaits
from evalstream.logging import get_logger
from evalstream.metrics import Metrics

__all__ = ["RequestSender", "endpoint_host"]

# The judge's logger: these events are the judge's own (judge_request_retry/_failed).
_log = get_logger("evalstream.judges.openai")

_T = TypeVar("_T")


def _backend_answered(error: JudgeError | None) -> bool:
    """Whether an attempt's outcome counts for the backend's health (the circuit breaker).

    Any HTTP error status below 500 (the retryable 4xx included) is an answer: the backend is up
    and the request, or its rate, was at fault. No status (a timeout or a broken
    connection), a 5xx, or a 2xx whose body is not JSON or is an error without an HTTP-like
    code (``classify_response`` marks both status 200) counts against it.
    """
    if error is None:
        return True
    return error.status is not None and error.status != 200 and error.status < 500


def endpoint_host(base_url: str) -> str:
    """The endpoint's host, with its port when the URL gives one, for error messages.

    The port tells apart judges on one host (two local servers, 127.0.0.1:8000 and :8001)
    and names the one refusing connections. Never the URL's credentials, path or query:
    they may hold a key. A default port (``:443`` on https) is dropped, as httpx drops it.
    """
    url = httpx.URL(base_url)
    host = url.host
    if not host:
        return "judge"
    if ":" in host:  # IPv6: bracketed, as in a URL, so its port reads apart from it
        host = f"[{host}]"
    return host if url.port is None else f"{host}:{url.port}"


def _transport_error(error: JudgeError) -> dict[str, str]:
    """What failed, for a log line, when there was no HTTP answer (``status`` None).

    Without it a refused connection, a reset and a timeout all logged ``status=None``, and
    the operator had to find an error result to learn which. These messages are built by
    ``_attempt`` from the exception's class and the judge's host (and port) only, never the
    URL or the server's words (an HTTP error's text stays out of the logs, as it may echo a
    request).
    """
    return {"error": str(error)} if error.status is None else {}


class RequestSender:
    """Sends an OpenAI judge's requests: spend cap, breaker, rate limits, retries, accounting.

    Args:
        name: The judge's configured name (metrics label, messages).
        config: Endpoint, credentials, limits, retries and prices.
        metrics: The worker's metrics container.
        redact: Scrubs the judge's credentials out of server text and messages.
        spend: The judge's spend cap (checked before each request, fed each cost).
        should_retry: Whether a failed attempt is worth retrying (the judge decides).
        waits: Where a request's waits are held, for a stop or a revoke to cancel.
    """

    def __init__(self, name: str, config: OpenAIJudgeConfig, metrics: Metrics,
                 redact: Scrubber, spend: SpendCap,
                 should_retry: Callable[[JudgeError], bool], waits: StoppableWaits) -> None:
        self.name = name
        self.config = config
        self._metrics = metrics
        self._redact = redact
        self._spend = spend
        self._should_retry = should_retry
        self._waits = waits
        secret = config.api_key.get_secret_value() if config.api_key else None
        headers = dict(config.headers)
        if secret:
            is_bearer = config.api_key_header.lower() == "authorization"
            headers[config.api_key_header] = f"Bearer {secret}" if is_bearer else secret
        self._http = ShardedClients(config.base_url, headers=headers, params=config.query,
                                    timeout_s=config.timeout_s,
                                    max_connections=config.max_concurrency)
        self._path = PATHS[config.api]
        #: The endpoint's host (and port), for error messages.
        self.host = endpoint_host(config.base_url)
        self._rps = (TokenBucket(config.requests_per_s, max(1.0, config.requests_per_s))
                     if config.requests_per_s else None)
        self._tpm = (TokenBucket(config.tokens_per_min / 60.0, float(config.tokens_per_min))
                     if config.tokens_per_min else None)
        state_gauge = metrics.judge_circuit_state.labels(name)
        state_gauge.set(0)
        self.breaker = CircuitBreaker(config.circuit_failures, config.circuit_reset_s,
                                      on_change=lambda s: state_gauge.set(int(s)))
        self._in_flight = metrics.judge_in_flight.labels(name)
        self._in_flight.set(0)
        #: The judge-wide pause after rate limiting; every request waits it out.
        self.pause = PauseGate()
        metrics.judge_rate_limit_pause.labels(name).set_function(self.pause.remaining)
        self._paused_s = metrics.judge_rate_limit_paused.labels(name)
        self._paused_s.inc(0)  # the series exists from start-up: an increase shows
        # 429s answered in a row, judge-wide (any other outcome ends the run).
        self._rate_limited_run = 0
        # The last 429's message: the cause named by a request that waited at the pause
        # for its whole deadline without sending anything ("after 0 request(s)").
        self._last_rate_limit = ""

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        """What the tokens cost in USD at the configured prices."""
        return (tokens_in * self.config.price_input_per_1k
                + tokens_out * self.config.price_output_per_1k) / 1000.0

    async def aclose(self) -> None:
        """Close the HTTP clients (their pooled connections)."""
        await self._http.aclose()

    async def send(self, payload: dict[str, Any], usage: Usage) -> Any:
        """POST ``payload`` until it is answered, refused or out of retries; the body.

        A 429 spends no retry with ``rate_limit_retry: until_deadline``: only the caller's
        deadline ends a rate-limited request.

        Raises:
            JudgeError: a non-retryable failure or retries exhausted (the class of
                the last attempt's error, e.g. ``LogprobsRejectedError``).
            JudgeSpendCapError: the spend cap is reached; nothing more is sent.
        """
        # ~4 characters per token: only the tokens-per-minute bucket needs the estimate.
        estimate = (len(json.dumps(payload, ensure_ascii=False)) // 4 + int(
            payload.get("max_tokens") or payload.get("n_predict") or 1)
            if self._tpm is not None else 0)
        attempt = 0
        retries = 0  # the attempts that count against max_retries
        while True:
            # Before every request of the logical call (retries and fallbacks too), so a
            # reached cap stops what is not sent yet.
            self._spend.check()
            # Before the token buckets: the requests held back by a pause then leave at
            # the configured rate, not all at once. The jitter spreads them out too.
            jitter = self.config.backoff_base_s / 2
            if self.pause.paused and not usage.last_error:
                usage.last_error = (f"{self._last_rate_limit} (to another request; this "
                                    f"one waited at the judge-wide pause)")
            # The pause may last backoff_max_s.
            pause_probe = await self._wait(self.pause.paused,
                                           partial(self.pause.acquire, jitter))
            settled = False
            try:
                probe = await self._wait(self.breaker.would_wait(), self.breaker.acquire)
                recorded = False
                try:
                    if self._rps is not None:
                        await self._wait(self._rps.would_wait(1.0),
                                         partial(self._rps.take, 1.0))
                    if self._tpm is not None:
                        await self._wait(self._tpm.would_wait(estimate),
                                         partial(self._tpm.take, float(estimate)))
                    attempt += 1
                    body, error = await self._attempt(payload, usage)
                    # record() waits for the breaker's lock, so a deadline can cancel it.
                    await self.breaker.record(_backend_answered(error), probe=probe)
                    recorded = True
                finally:
                    if not recorded:
                        # Ended without an outcome (cancelled, or an unexpected error): a
                        # half-open probe that is never released keeps the breaker
                        # half-open, and every later request waits for it until its deadline.
                        await self.breaker.abandon(probe=probe)
                # Only a 429 worth retrying is rate limiting: one saying the account is out
                # of credit (openai_wire.QuotaExhaustedError) fails its request at once and
                # pauses nobody, as any other answer lifts the pause.
                rate_limited = error is not None and error.status == 429 and error.retryable
                if error is not None and rate_limited:
                    self._pause_for(error)  # before settle(): the waiters see the new pause
                else:
                    self._rate_limited_run = 0
                self.pause.settle(pause_probe, rate_limited=rate_limited)
                settled = True
            finally:
                if not settled:
                    # Likewise for the pause's probe: the requests waiting for its outcome
                    # would wait until their deadlines.
                    self.pause.abandon(pause_probe)
            if error is None:
                self._metrics.judge_requests.labels(self.name, "ok").inc()
                if self._tpm is not None and usage.tokens_in + usage.tokens_out > estimate:
                    self._tpm.debit(usage.tokens_in + usage.tokens_out - estimate)
                return body
            usage.last_error = str(error)
            if not (rate_limited and self.config.rate_limit_retry == "until_deadline"):
                retries += 1
            if not self._should_retry(error) or retries > self.config.max_retries:
                self._metrics.judge_requests.labels(self.name, "error").inc()
                final = f"{error} (after {attempt} attempt{'s' if attempt > 1 else ''})"
                _log.error("judge_request_failed", judge=self.name, status=error.status,
                           attempts=attempt, retryable=error.retryable,
                           **_transport_error(error))
                # Same class as the attempt's error: _judge tells a rejection of the
                # logprobs parameters from any other 400 by it.
                raise type(error)(self._redact(final), retryable=error.retryable,
                                  status=error.status, retry_after=error.retry_after)
            outcome = "rate_limited" if rate_limited else "retry"
            self._metrics.judge_requests.labels(self.name, outcome).inc()
            delay = backoff_delay(attempt, self.config.backoff_base_s, self.config.backoff_max_s,
                                  error.retry_after)
            _log.warning("judge_request_retry", judge=self.name, status=error.status,
                         attempt=attempt, delay_s=round(delay, 3), **_transport_error(error))
            # A Retry-After is honoured above backoff_max_s, up to the deadline.
            await self._wait(True, partial(asyncio.sleep, delay))

    def _wait(self, waits: bool, wait: Callable[[], Awaitable[_T]]) -> Awaitable[_T]:
        """``wait()``, held where a stop or a revoke cancels it when it ``waits``: its
        evaluation is then redelivered (nothing more of it is sent). A wait that returns
        at once is not held, so a stop's drain lets that request go on."""
        return self._waits.wait(wait) if waits else wait()

    def _pause_for(self, error: JudgeError) -> None:
        """Pause the whole judge after a 429: until its ``Retry-After`` (at most
        ``backoff_max_s``: a bogus "1e9" must not stop the judge for good; the request
        that got it still honours all of it), or without one, once 429s come in a row,
        for a backoff that grows with the run."""
        self._rate_limited_run += 1
        self._last_rate_limit = str(error)
        if error.retry_after is not None:
            pause = min(error.retry_after, self.config.backoff_max_s)
        elif self._rate_limited_run >= 2:
            pause = backoff_delay(self._rate_limited_run - 1, self.config.backoff_base_s,
                                  self.config.backoff_max_s)
        else:
            return  # one 429 without Retry-After may be that request's own (its size)
        was_paused = self.pause.remaining() > 0
        added = self.pause.hold(pause)
        if added > 0:
            self._paused_s.inc(added)
            if not was_paused:
                _log.warning("judge_rate_limit_pause", judge=self.name,
                             pause_s=round(pause, 3), rate_limited_in_a_row=self._rate_limited_run)

    async def _attempt(self, payload: dict[str, Any],
                       usage: Usage) -> tuple[Any, JudgeError | None]:
        """One HTTP exchange: (parsed body, None) or (body if any, classified error)."""
        # A connection slot (max_concurrency) is waited for where a stop or a revoke
        # cancels the wait, as the others before sending: with more evaluations in flight
        # than slots, requests queue here for as long as the judge takes to answer those
        # ahead of them, up to their deadline, and nothing of them is sent yet.
        async with self._http.client(self._waits.wait) as client:
            # Again once a connection slot is ours: while this request waited (breaker,
            # rate limits, max_concurrency) others' answers may have reached the cap. So
            # only the requests actually on the wire can overshoot it.
            self._spend.check()
            usage.requests += 1  # counted here: a request refused just above is not sent
            self._in_flight.inc()
            start = time.perf_counter()
            try:
                # httpx's timeout is per phase (each read): a body that keeps trickling in
                # never trips it, and that one attempt took the whole deadline, unretried
                # and unseen by the breaker. So the exchange as a whole is bounded too.
                async with asyncio.timeout(self.config.timeout_s):
                    response = await post_bounded(client, self._path, payload)
            except TimeoutError:
                return None, JudgeError(
                    f"judge {self.name!r}: ResponseTimeout after {self.config.timeout_s:g}s "
                    f"talking to {self.host} (no complete response within timeout_s)",
                    retryable=True)
            except BodyTooLargeError as exc:
                # Like a 2xx body that is not JSON (a proxy's page, a crashing server):
                # status 200 marks it for the breaker.
                return None, JudgeError(
                    f"judge {self.name!r}: response body of {exc} from {self.host}",
                    retryable=True, status=200)
            except httpx.TimeoutException as exc:
                return None, JudgeError(
                    f"judge {self.name!r}: {type(exc).__name__} after "
                    f"{self.config.timeout_s:g}s talking to {self.host}", retryable=True)
            except httpx.TransportError as exc:
                return None, JudgeError(
                    f"judge {self.name!r}: {type(exc).__name__} talking to {self.host}",
                    retryable=True)
            except httpx.RequestError as exc:
                # The rest of httpx's request errors, e.g. DecodingError for a corrupt
                # (gzip) body from a proxy: an unhealthy exchange, retried and counted by
                # the breaker like a transport error, never escaping unclassified.
                return None, JudgeError(
                    f"judge {self.name!r}: {type(exc).__name__} from {self.host}",
                    retryable=True)
            finally:
                self._in_flight.dec()
                self._metrics.judge_latency.labels(self.name).observe(
                    time.perf_counter() - start)
        return self._classify(response, usage)

    def _classify(self, response: httpx.Response,
                  usage: Usage) -> tuple[Any, JudgeError | None]:
        body, error = classify_response(response, judge=self.name, host=self.host,
                                        redact=self._redact)
        if body is not None:
            # Answers, and 2xx error bodies: a model that failed mid-answer may be billed.
            self._account(body, usage)
        return body, error

    def _account(self, body: Any, usage: Usage) -> None:
        tokens_in, tokens_out = read_tokens(body)
        usage.tokens_in += tokens_in
        usage.tokens_out += tokens_out
        if tokens_in:
            self._metrics.judge_tokens.labels(self.name, "in").inc(tokens_in)
        if tokens_out:
            self._metrics.judge_tokens.labels(self.name, "out").inc(tokens_out)
        cost = self.cost(tokens_in, tokens_out)
        if cost:
            self._metrics.judge_cost.labels(self.name).inc(cost)
            self._spend.add(cost)
