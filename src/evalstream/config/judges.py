"""Judge backends, by name. Evaluators choose one with ``judge: NAME``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator

from evalstream.config.section import Section

__all__ = [
    "ENDPOINT_PATHS",
    "MASK",
    "BuiltinJudgeConfig",
    "CascadeJudgeConfig",
    "JudgeConfig",
    "OpenAIJudgeConfig",
    "header_safe",
    "judge_identity",
    "judges_reached",
    "longest_call_s",
    "redact_url",
]

#: What masked values print as (the same as a dumped ``SecretStr``).
MASK = "**********"


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` and any query (``?key=...``) replaced by the
    mask, for printing."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket: print nothing of it
        return MASK
    if "@" not in parts.netloc and not parts.query:
        return url  # as written (urlunsplit would normalise it)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=f"{MASK}@{parts.netloc.rpartition('@')[2]}")
    if parts.query:
        parts = parts._replace(query=MASK)
    return urlunsplit(parts)


def _url_problem(url: str) -> str | None:
    """Why httpx, which sends the judge's requests, cannot use ``url`` (None when it can).

    httpx's own message may quote parts of the URL: any user info in it is masked.
    """
    import httpx  # only configs with an LLM judge pay for importing it here

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        message = str(exc)
        userinfo = url.split("//", 1)[-1].split("/", 1)[0].rpartition("@")[0]
        for part in sorted({userinfo, *userinfo.split(":")}, key=len, reverse=True):
            if part:
                message = message.replace(part, MASK)
        return message
    if not parsed.host:
        return "it names no host"
    if parsed.port is not None and not 0 < parsed.port < 65536:
        return f"port {parsed.port} is out of range"
    return None


#: The request path each ``api`` adds to ``base_url`` (so never part of a base). The judge
#: sends to these; ``chat`` comes first, as "/completions" ends its path too.
ENDPOINT_PATHS = {"chat": "chat/completions", "completions": "completions",
                  "llamacpp": "completion"}


def _endpoint_in_url(url: str) -> str | None:
    """The endpoint path ``url`` already ends with (a pasted endpoint URL), or None."""
    import httpx

    path = httpx.URL(url).path.rstrip("/").lower()
    return next((f"/{p}" for p in ENDPOINT_PATHS.values() if path.endswith(f"/{p}")), None)


def _has_query(url: str) -> bool:
    """Whether ``url`` has a query, even an empty one (``...v1?``)."""
    import httpx

    return b"?" in httpx.URL(url).raw_path


def header_safe(text: str) -> bool:
    """Whether an HTTP header can carry ``text`` as it is (printable ASCII, no line break)."""
    return text.isascii() and text.isprintable()


class BuiltinJudgeConfig(Section):
    """The offline judge: lexicons and patterns, no network."""

    type: Literal["builtin"] = "builtin"


class OpenAIJudgeConfig(Section):
    """Any OpenAI-compatible endpoint (OpenAI, Azure OpenAI, vLLM, llama.cpp, Ollama, LiteLLM)."""

    type: Literal["openai"] = "openai"
    base_url: str = Field(min_length=1)
    model: str = Field(min_length=1)
    #: chat: ``/chat/completions``; completions: legacy ``/completions``; llamacpp: the
    #: llama.cpp server's native ``/completion`` (``n_probs``).
    api: Literal["chat", "completions", "llamacpp"] = "chat"
    #: The key comes from the environment or a file, never from the YAML itself.
    api_key_env: str | None = None
    api_key_file: Path | None = None
    #: Filled from api_key_env / api_key_file at load time, or set with
    #: EVALSTREAM_JUDGES__NAME__API_KEY; refused in the YAML file; never printed.
    api_key: SecretStr | None = None
    #: Header used for the key: "Authorization" sends "Bearer KEY"; Azure uses "api-key".
    api_key_header: str = "Authorization"
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    #: auto: ask for logprobs, fall back to a JSON answer when they are missing.
    logprobs: Literal["auto", "always", "never"] = "auto"
    top_logprobs: int = Field(default=10, ge=1, le=20)
    #: When none of the answer options is among the top tokens: fail the evaluation with a
    #: clear error ("error"), or ask again for a strict JSON answer ("json").
    on_missing_options: Literal["error", "json"] = "error"
    #: The least probability the answer options must carry together in the first token's
    #: top tokens; below it the answer counts as "no option found" (``on_missing_options``)
    #: rather than reading a verdict from what is left when the judge meant to say
    #: something else (an echo of the content, a preamble).
    min_option_mass: float = Field(default=0.5, ge=0.0, le=1.0)
    #: Token budget of a JSON answer (``{"output": "..."}``) when logprobs are unavailable.
    json_max_tokens: int = Field(default=16, ge=4, le=256)
    #: The most one HTTP attempt may take, from connecting to the response's last byte
    #: (a body trickling in slowly counts as a timeout: retried, and a failure for the
    #: circuit breaker); ``deadline_s`` bounds all attempts of a request.
    timeout_s: float = Field(default=30.0, gt=0)
    max_concurrency: int = Field(default=16, ge=1)
    requests_per_s: float | None = Field(default=None, gt=0)
    tokens_per_min: int | None = Field(default=None, gt=0)
    #: Retries of a failed attempt that is worth retrying (5xx, timeouts, resets, 408/409/
    #: 425), with jittered backoff honouring ``Retry-After``; then an error result.
    max_retries: int = Field(default=4, ge=0)
    #: Rate limiting (HTTP 429): "until_deadline" retries it (Retry-After honoured,
    #: jittered backoff) until the request's ``deadline_s``, whatever ``max_retries`` says,
    #: so a rate-limited period holds the work (in-flight slots fill, partitions pause, the
    #: period becomes consumer lag) and only a period past ``deadline_s`` ends as error
    #: results naming the 429. "max_retries" counts 429s like other retryable errors.
    #: Either way a 429 pauses the whole judge (every request waits) until its
    #: Retry-After, at most ``backoff_max_s``, or, without one, for a backoff once 429s
    #: come in a row.
    rate_limit_retry: Literal["until_deadline", "max_retries"] = "until_deadline"
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    circuit_failures: int = Field(default=5, ge=1)
    circuit_reset_s: float = Field(default=30.0, gt=0)
    #: How long an evaluation may wait for this judge before it is published as an error.
    deadline_s: float = Field(default=300.0, gt=0)
    price_input_per_1k: float = Field(default=0.0, ge=0)
    price_output_per_1k: float = Field(default=0.0, ge=0)
    #: Hard ceiling on this judge's spend (USD, at the prices above, from the token usage
    #: the endpoint reports) within the last ``spend_cap_window_s`` seconds. Once reached,
    #: requests are refused without being sent (error results; a cascade keeps its first
    #: judge's answer) until spend leaves the window. Per worker replica: with N replicas,
    #: set cap/N. None: no cap.
    spend_cap_usd: float | None = Field(default=None, gt=0)
    #: The cap's rolling window in seconds (default: a day).
    spend_cap_window_s: float = Field(default=86_400.0, ge=60)
    #: At the cap: "error" publishes the evaluations as error results (above); "wait"
    #: holds each request until spend leaves the window (no deadline_s meanwhile), so the
    #: worker's in-flight slots fill, its partitions pause and the cap becomes consumer
    #: lag, nothing skipped (cascades escalating to this judge wait too).
    on_spend_cap: Literal["error", "wait"] = "error"
    cache_size: int = Field(default=10_000, ge=0)
    cache_ttl_s: float = Field(default=3_600.0, gt=0)

    @model_validator(mode="after")
    def _one_key_source(self) -> OpenAIJudgeConfig:
        if self.api_key_env and self.api_key_file:
            raise ValueError("give api_key_env or api_key_file, not both")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// "
                             f"(got {redact_url(self.base_url)!r})")
        problem = _url_problem(self.base_url)
        if problem is not None:
            # Caught here, it is a config error (exit 2), not an httpx traceback at start-up.
            raise ValueError(f"base_url is not a usable URL: {problem} "
                             f"(got {redact_url(self.base_url)!r})")
        if _has_query(self.base_url):
            # httpx joins the request path onto base_url's query, not its path: requests
            # went to the base path itself, the query mangled (or replaced by `query`), and
            # check-config printed it unmasked. Never echoed: gateways take keys as ?key=.
            raise ValueError("base_url has a query (?...), which the judge cannot send: put "
                             "its parameters under `query` (a key among them set with "
                             "EVALSTREAM_JUDGES__<NAME>__QUERY as JSON)")
        endpoint = _endpoint_in_url(self.base_url)
        if endpoint is not None:
            # The judge adds the endpoint's path itself: every request went to
            # .../chat/completions/chat/completions and got a 404, while check-config
            # called the configuration valid.
            raise ValueError(f"base_url ends with the endpoint path {endpoint!r}: give the "
                             f"base it is under (e.g. https://api.openai.com/v1); the judge "
                             f"adds the path of its `api` (chat: /chat/completions)")
        # What httpx cannot send fails every request (a line break: a transport error,
        # retried until the deadline) or crashes start-up (non-ASCII): say so here, naming
        # the header, never its value (which may be a key).
        unsendable = sorted(name for name, value in
                            [*self.headers.items(), (self.api_key_header, "x")]
                            if not header_safe(value) or not header_safe(name)
                            or not name or " " in name)
        if unsendable:
            raise ValueError(f"headers {unsendable}: names and values must be printable "
                             f"ASCII without line breaks or control characters")
        secretish = {h.lower() for h in self.headers} & {"authorization", "api-key", "x-api-key"}
        if secretish:
            # The key belongs in api_key_*: those are SecretStr from the environment or a file.
            raise ValueError(f"headers: put the key in api_key_env/api_key_file (with "
                             f"api_key_header), not in headers {sorted(secretish)}")
        if self.spend_cap_usd is not None and not (self.price_input_per_1k
                                                   or self.price_output_per_1k):
            # With both prices 0 every request costs 0: the cap could never be reached.
            raise ValueError("spend_cap_usd needs price_input_per_1k or price_output_per_1k "
                             "above 0 (with both at 0 no spend is ever counted)")
        if self.on_spend_cap == "wait" and self.spend_cap_usd is None:
            raise ValueError("on_spend_cap: wait needs spend_cap_usd (without a cap nothing "
                             "ever waits)")
        if self.deadline_s < self.timeout_s:
            raise ValueError(f"deadline_s ({self.deadline_s}) must be >= timeout_s "
                             f"({self.timeout_s})")
        return self


class CascadeJudgeConfig(Section):
    """Ask ``first`` (usually builtin); escalate to ``then`` when it is not confident."""

    type: Literal["cascade"] = "cascade"
    first: str = "builtin"
    then: str = Field(min_length=1)
    #: Escalate when the first judge's confidence (|p-0.5|*2 or top-class margin) is below this.
    min_confidence: float = Field(default=0.6, ge=0.0, le=1.0)


JudgeConfig = Annotated[
    BuiltinJudgeConfig | OpenAIJudgeConfig | CascadeJudgeConfig, Field(discriminator="type")
]


def judge_identity(judges: Mapping[str, JudgeConfig], name: str, *,
                   builtin_version: str, prompt_version: str) -> Any:
    """What makes judge ``name`` give the scores it gives: its kind, model and scoring
    options (``_openai_identity``), not its name, address, credentials, limits or prices.
    Part of every result's id, so re-scoring with another model or another way of reading
    its answer is a new result, while renaming a judge or moving its endpoint is not. A
    cascade's is its steps' identities and ``min_confidence``.

    Args:
        judges: The configured judges, by name.
        name: The judge an evaluator names.
        builtin_version: The builtin judge's version (``judges.builtin.VERSION``; passed
            in because config sits below judges): a new one is a new builtin identity,
            in cascades too. At ``"1"`` the identity is ``"builtin"`` as it was before
            the builtin judge had a version, so those result ids stay the same.
        prompt_version: The version of the OpenAI judge's prompt rendering
            (``judges.prompt.PROMPT_VERSION``, passed in likewise): a new one is a new
            identity of every OpenAI judge, in cascades too. At ``"1"`` it adds nothing.
    """
    config = judges.get(name)
    if config is None or isinstance(config, BuiltinJudgeConfig):
        return "builtin" if builtin_version == "1" else f"builtin@{builtin_version}"
    if isinstance(config, OpenAIJudgeConfig):
        identity = _openai_identity(config)
        if prompt_version != "1":
            # What the judge is asked is its prompt as much as its model: a new rendering
            # (preamble, layout, escaping) can change the answer to the same request.
            identity["prompt"] = prompt_version
        return identity
    versions = {"builtin_version": builtin_version, "prompt_version": prompt_version}
    return {"cascade": [judge_identity(judges, config.first, **versions),
                        judge_identity(judges, config.then, **versions)],
            "min_confidence": config.min_confidence}


#: ``top_logprobs`` of every result scored before it was part of the identity (the
#: default then): at this value it adds nothing, so those results keep their ids. A
#: literal, not the field's default: a new default reads another mass, so new ids.
_IDENTITY_TOP_LOGPROBS = 10


def _openai_identity(config: OpenAIJudgeConfig) -> dict[str, Any]:
    """An OpenAI judge's identity: model, api, and the options that can give the same
    event another score, each only when it is not the value every result had before it
    was part of the identity (so those ids stay the same).

    In it: ``logprobs: never`` (every answer a strict JSON one, 0/1 probabilities, where
    otherwise the first token's distribution is read) and, when logprobs are read,
    ``top_logprobs`` (how many candidate tokens' mass is summed per option, so another
    distribution). ``auto`` and ``always`` are one identity: for the same reply they give
    the same score, ``always`` an error where ``auto`` asks again for a JSON answer; the
    JSON answers of ``auto`` after it switched logprobs off (a backend that rejects them
    or sends none three times in a row) are its fallback, as a capped cascade's first
    answer is. Likewise out of it, since they only decide between a score and an error
    for the same event, never between two scores (an error result has the score's id,
    so a retry with them replaces the error): ``on_missing_options`` (an error or a
    JSON answer when no option is among the top tokens), ``min_option_mass`` (when the
    options carry too little of the first token to count as found) and
    ``json_max_tokens`` (a
    greedy, temperature-0 answer is the same text whatever the budget; a budget too
    small cuts it, and a cut answer is no valid JSON). The rest is transport and economy:
    endpoint, credentials, headers, timeouts, retries, limits, prices, spend cap, cache.
    """
    identity: dict[str, Any] = {"model": config.model, "api": config.api}
    if config.logprobs == "never":
        identity["logprobs"] = "never"  # top_logprobs is then never asked for
    elif config.top_logprobs != _IDENTITY_TOP_LOGPROBS:
        identity["top_logprobs"] = config.top_logprobs
    return identity


def judges_reached(judges: Mapping[str, JudgeConfig], names: Iterable[str]) -> set[str]:
    """``names`` and every step of the cascades among them, nested ones too: the judges
    asking one of ``names`` may reach. Each once, so a cycle (reported when the judges are
    built) ends the walk."""
    reached: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in reached:
            continue
        reached.add(name)
        config = judges.get(name)
        if isinstance(config, CascadeJudgeConfig):
            pending.extend((config.first, config.then))
    return reached


def longest_call_s(judges: Mapping[str, JudgeConfig], name: str,
                   _seen: frozenset[str] = frozenset()) -> float:
    """The longest one call to judge ``name`` can take, in seconds: an OpenAI judge's
    ``deadline_s``, a cascade's steps added (it may escalate), 0 for the builtin judge.

    A cascade met again on its own path counts 0: the cycle is reported when the judges
    are built.
    """
    config = judges.get(name)
    if isinstance(config, OpenAIJudgeConfig):
        return config.deadline_s
    if not isinstance(config, CascadeJudgeConfig) or name in _seen:
        return 0.0
    seen = _seen | {name}
    return longest_call_s(judges, config.first, seen) + longest_call_s(judges, config.then, seen)
