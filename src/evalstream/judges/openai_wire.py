"""The OpenAI-compatible wire format, as the OpenAI judge speaks it.

This module owns what goes over the wire and how to read what comes back, for the three
endpoint flavours (``api``): OpenAI ``chat/completions``, legacy ``completions`` and
llama.cpp's native ``completion``. It builds request payloads, reads the answer text and
token usage out of response bodies, and interprets HTTP error bodies (the OpenAI-style
``error`` object, whether a 400 rejects the logprobs parameters, which statuses are worth
retrying). It does no I/O and holds no state: the client owns connections, retries, the
circuit breaker, rate limits and metrics (``openai_send.py``), and caching
(``openai_compat.py``).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from evalstream.config.judges import ENDPOINT_PATHS
from evalstream.errors import JudgeError
from evalstream.judges.prompt import messages_to_prompt
from evalstream.judges.resilience import parse_retry_after

__all__ = [
    "PATHS",
    "LogprobsRejectedError",
    "QuotaExhaustedError",
    "Usage",
    "build_payload",
    "classify_response",
    "read_tokens",
    "reading_response",
    "response_text",
]

# The request path per endpoint flavour, relative to the configured base_url (defined with
# the config, which refuses a base_url that already ends with one).
PATHS = ENDPOINT_PATHS
# A 400 whose error names one of these parameters rejects logprobs as such (the backend
# does not support them); any other 400 is about that one request (content filter, prompt
# too long) and says nothing about logprobs.
_LOGPROB_PARAMS = re.compile(r"logprob|n_probs", re.IGNORECASE)
# The client errors that say "try again": request timeout, conflict (a lock or a busy
# resource on the provider's side), too early (RFC 8470) and too many requests.
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})
_NON_RETRYABLE_HINT = {
    400: "the request was rejected (bad parameters or model)",
    401: "authentication failed: check the API key",
    403: "access denied: check the key's permissions",
    404: "not found: check base_url and model",
    422: "the request was rejected (unprocessable)",
}
# OpenAI answers HTTP 429 both to a rate limit and to an account out of credit; only the
# error's ``code`` (or its ``type``: some answers carry ``"code": null``) tells them apart.
# Waiting cannot bring credit back, so this one is not retried. Other backends: vLLM and
# llama.cpp meter no account; Azure OpenAI's quota is a rate (429 with a Retry-After, waited
# out) and API Management's call quota a 403 (never retried anyway).
_QUOTA_EXHAUSTED = "insufficient_quota"
_QUOTA_HINT = ("the provider account's quota is exhausted (insufficient_quota): add credit or "
               "raise its limits in the account's plan and billing settings; retrying cannot "
               "help")
# What reading an odd but well-formed JSON body can raise (huge or non-finite numbers,
# unexpected types, deep nesting): each becomes a JudgeError, never escapes as itself.
_PARSE_ERRORS = (ArithmeticError, ValueError, TypeError, LookupError, AttributeError,
                 RecursionError)


@dataclass(slots=True)
class Usage:
    """What one logical call cost (possibly several HTTP attempts)."""

    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    last_error: str | None = None


# --- requests -----------------------------------------------------------------------------


def build_payload(api: str, model: str, messages: list[dict[str, str]], *, max_tokens: int,
                  logprobs: bool, top_logprobs: int) -> dict[str, Any]:
    """The JSON body of one deterministic (``temperature`` 0) request.

    Args:
        api: The endpoint flavour: ``chat``, ``completions`` or ``llamacpp``.
        model: The model name (llama.cpp's native endpoint takes none).
        messages: The chat messages; flattened into one prompt for the other flavours.
        max_tokens: The most tokens to generate.
        logprobs: Whether to ask for the top logprobs of each generated token.
        top_logprobs: How many top logprobs to ask for.

    Returns:
        The payload to POST to ``PATHS[api]``.
    """
    n = top_logprobs
    if api == "chat":
        payload: dict[str, Any] = {"model": model, "messages": messages,
                                   "max_tokens": max_tokens, "temperature": 0}
        if logprobs:
            payload.update(logprobs=True, top_logprobs=n)
        return payload
    prompt = messages_to_prompt(messages, answer_prefix="Answer:")
    if api == "completions":
        payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                   "temperature": 0}
        if logprobs:
            payload["logprobs"] = n
        return payload
    payload = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0,
               "cache_prompt": True}
    if logprobs:
        payload["n_probs"] = n
    return payload


# --- responses ----------------------------------------------------------------------------


def response_text(body: Any, api: str, *, judge: str) -> str:
    """The generated text of a successful response body.

    Args:
        body: The parsed JSON body.
        api: The endpoint flavour that answered (see ``build_payload``).
        judge: The judge's configured name, for the error message.

    Raises:
        JudgeError: The body has no answer text where ``api`` puts it.
    """
    try:
        if api == "llamacpp":
            text = body["content"]
        elif api == "completions":
            text = body["choices"][0]["text"]
        else:
            text = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise JudgeError(f"judge {judge!r}: response has no answer text") from None
    if not isinstance(text, str):
        raise JudgeError(f"judge {judge!r}: response has no answer text")
    return _utf8_safe(text)


def _utf8_safe(text: str) -> str:
    """``text`` with any lone surrogate as ``?``.

    A ``"\ud83d"`` escape in a body (a model's text cut inside an emoji) is a lone
    surrogate once parsed, which no result quoting the text (a reason, an error) could be
    serialised with.
    """
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


@contextlib.contextmanager
def reading_response(what: str, *, judge: str, host: str) -> Iterator[None]:
    """Turn an unexpected failure to read a response into a non-retryable JudgeError.

    The same request would get the same odd answer again, so it is not retried; the
    JudgeErrors raised on purpose (missing logprobs, options not found) pass through.

    Args:
        what: What is being read (``logprobs``, ``answer``), for the error message.
        judge: The judge's configured name, for the error message.
        host: The endpoint's host, for the error message.
    """
    try:
        yield
    except _PARSE_ERRORS as exc:
        raise JudgeError(f"judge {judge!r}: unreadable {what} in the response from "
                         f"{host} ({type(exc).__name__})", retryable=False) from None


def read_tokens(body: Any) -> tuple[int, int]:
    """The (prompt, completion) token counts a response body reports (0 when absent)."""
    tokens_in = tokens_out = 0
    if isinstance(body, Mapping):
        u = body.get("usage")
        if isinstance(u, Mapping):
            tokens_in = _count(u.get("prompt_tokens"))
            tokens_out = _count(u.get("completion_tokens"))
        else:  # llama.cpp native
            tokens_in = _count(body.get("tokens_evaluated"))
            tokens_out = _count(body.get("tokens_predicted"))
    return tokens_in, tokens_out


#: More tokens than any request can hold: a count above it is corrupt. Summed over a
#: call's attempts and priced, such a count (1e308) overflowed a float and crashed judge().
_MAX_TOKENS = 2**31


def _count(value: Any) -> int:
    """A token count from a response (0 when absent, not a number, NaN, infinite or past
    any real count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if isinstance(value, float) and not math.isfinite(value):
        return 0  # Python's json reads the bare literals NaN and Infinity
    count = max(0, int(value))
    return count if count <= _MAX_TOKENS else 0


# --- errors -------------------------------------------------------------------------------


class LogprobsRejectedError(JudgeError):
    """An HTTP 400 (or a 2xx body carrying an error with code 400) whose error points at
    the logprobs parameters."""


class QuotaExhaustedError(JudgeError):
    """An HTTP 429 whose error is ``insufficient_quota``: the provider account has no credit
    left. Not retryable, and not rate limiting (it pauses nothing)."""


def classify_response(response: httpx.Response, *, judge: str, host: str,
                      redact: Callable[[str], str]) -> tuple[Any, JudgeError | None]:
    """Read one HTTP response: (parsed body, None) or (parsed body or None, classified error).

    Args:
        response: The endpoint's response.
        judge: The judge's configured name, for error messages.
        host: The endpoint's host, for error messages.
        redact: Scrubs the API key from server-supplied text (a server may echo it).

    Returns:
        The parsed JSON body of a 2xx response; otherwise a ``JudgeError`` that says
        whether it is retryable (408, 409, 425, 429, 5xx and a non-JSON 2xx body) and
        carries the status and ``Retry-After``. A 400 that names the logprobs parameters is a
        ``LogprobsRejectedError``; a 429 saying ``insufficient_quota`` (no credit left, so
        not worth retrying) a ``QuotaExhaustedError``. A 2xx body that is an error object
        is an error too (see ``_error_in_body``), returned with its body: the usage it
        reports still cost money.
    """
    status = response.status_code
    if 200 <= status < 300:
        try:
            body = response.json()
        except (ValueError, RecursionError):
            # A proxy or a crashing server; status 200 marks it for the breaker.
            return None, JudgeError(f"judge {judge!r}: HTTP {status} with a non-JSON "
                                    f"body from {host}", retryable=True, status=200)
        error = _error_in_body(body, response, judge=judge, host=host, redact=redact)
        return body, error
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    fields = _error_fields(response)
    detail = _error_detail(fields, redact)
    if status == 429 and _QUOTA_EXHAUSTED in (fields.get("code"), fields.get("type")):
        return None, QuotaExhaustedError(f"judge {judge!r}: HTTP 429 from {host}: "
                                         f"{_QUOTA_HINT}{detail}", retryable=False, status=429)
    if _retryable_status(status):
        return None, JudgeError(f"judge {judge!r}: HTTP {status} from {host}"
                                f"{detail}", retryable=True, status=status,
                                retry_after=retry_after)
    if 300 <= status < 400:
        # httpx does not follow redirects, and a judge endpoint should not need one.
        hint = "redirect not followed: check base_url (https://, the path's ending /v1)"
    else:
        hint = _NON_RETRYABLE_HINT.get(status, "client error")
    kind = (LogprobsRejectedError if status == 400 and _names_logprobs(response)
            else JudgeError)
    return None, kind(f"judge {judge!r}: HTTP {status} from {host}: "
                      f"{hint}{detail}", retryable=False, status=status)


def _retryable_status(status: int) -> bool:
    """Whether an HTTP status says "try again": 408, 409, 425, 429 or any 5xx."""
    return status in _RETRYABLE_4XX or status >= 500


def _error_in_body(body: Any, response: httpx.Response, *, judge: str, host: str,
                   redact: Callable[[str], str]) -> JudgeError | None:
    """The error a 2xx body carries instead of an answer (None when it carries none).

    OpenRouter answers 200 with ``{"error": {"code": 502, "message": ...}}`` when the model
    fails after the request was accepted, ``code`` holding an HTTP-like status; other
    gateways send ``{"error": "some text"}``. Read as an answer, either was only "no answer
    text", never retried. Such an error is retryable exactly when its code, as an HTTP
    status, would be; it carries that status (so a 429 counts as rate limiting and a 5xx
    against the circuit breaker), or 200 when there is none, like an unreadable 2xx body.
    An ``error`` that is null or empty next to an answer is no error.
    """
    error = body.get("error") if isinstance(body, Mapping) else None
    if not (isinstance(error, Mapping) and error) and not (isinstance(error, str)
                                                           and error.strip()):
        return None
    fields = _fields_of(error)
    code = _http_status(fields.get("code"))
    # Some gateways wrap the backend's 400 in a 200 (OpenRouter-style): one naming the
    # logprobs parameters is the same rejection as an HTTP 400 saying so, and in auto mode
    # the judge falls back to a JSON answer instead of failing every request.
    kind = (LogprobsRejectedError if code == 400 and _fields_name_logprobs(fields)
            else JudgeError)
    return kind(
        f"judge {judge!r}: HTTP {response.status_code} from {host} carries "
        f"{f'error {code}' if code else 'an error'}{_error_detail(fields, redact)}",
        retryable=code is not None and _retryable_status(code),
        status=code or response.status_code,
        retry_after=parse_retry_after(response.headers.get("retry-after")))


def _http_status(code: Any) -> int | None:
    """An error body's ``code`` as an HTTP status (100-599; a number or a string of digits).

    Anything else (OpenAI's "invalid_api_key", a float, a bool) is no status.
    """
    if isinstance(code, str) and len(code) == 3 and code.isascii() and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code <= 599:
        return code
    return None


def _error_detail(fields: Mapping[str, Any], redact: Callable[[str], str]) -> str:
    message = fields.get("message")
    if not message:
        return ""
    return f" ({_utf8_safe(redact(str(message))[:200])})"


def _error_fields(response: httpx.Response) -> dict[str, Any]:
    """The OpenAI-style ``error`` object of an error response ({} when there is none)."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        return {}
    return _fields_of(body.get("error") if isinstance(body, Mapping) else None)


def _fields_of(error: Any) -> dict[str, Any]:
    """An ``error`` member as fields: an object as is, a string as its ``message``."""
    if isinstance(error, Mapping):
        return dict(error)
    return {"message": error} if isinstance(error, str) else {}


def _names_logprobs(response: httpx.Response) -> bool:
    """Whether an error response points at the logprobs parameters (param, code, message).

    A body that is not an OpenAI-style error (a plain-text 400 from a small server) is
    searched as text.
    """
    fields = _error_fields(response)
    if fields:
        return _fields_name_logprobs(fields)
    # Not ``response.text``: that decodes with the charset the server names, and a bogus
    # one ("rot13", "utf-16" without a BOM) raised TypeError or UnicodeError out of
    # judge(). The parameter names sought are ASCII.
    return bool(_LOGPROB_PARAMS.search(response.content[:1000].decode("utf-8", "replace")))


def _fields_name_logprobs(fields: Mapping[str, Any]) -> bool:
    """Whether an error object's ``param``, ``code`` or ``message`` names logprobs."""
    return any(isinstance(v := fields.get(k), str) and _LOGPROB_PARAMS.search(v)
               for k in ("param", "code", "message"))
