"""Wire contracts: the normalised input event and the published outputs.

``TraceEvent`` is what every format decoder produces; ``EvalResult`` and ``Alert`` are what
the worker publishes. orjson is imported here and nowhere else: JSON on Kafka (trace
messages in, results and alerts out) goes through ``load_json`` / ``dump_json``. The one
other parser of trace messages is ``flat_json``'s sampling probe (msgspec), which only reads
a message's sampling key: a message it keeps is decoded with ``load_json``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CANARY_ATTRIBUTE",
    "GOLD_ATTRIBUTE_PREFIX",
    "SCHEMA_VERSION",
    "Alert",
    "EvalResult",
    "JudgeInfo",
    "Message",
    "ProbabilitySource",
    "RawRecord",
    "Record",
    "TraceEvent",
    "combine_sources",
    "dump_json",
    "eval_result_json_schema",
    "load_json",
    "read_result",
    "result_id",
    "result_ids",
    "stable_hash",
]

#: The version of the published contracts (``EvalResult``, ``Alert``; the ``schema_version``
#: field and header). Minor: fields added (1.1: ``EvalResult.evaluator_version``; 1.2:
#: ``canary`` and ``gold``; 1.3: ``judge.probabilities_from``); major: a field removed,
#: renamed or retyped.
SCHEMA_VERSION = "1.3"

#: The event attribute that marks a canary: an event with a known answer, injected to check
#: the judge inside the stream. ``"true"`` makes the event a canary: it is evaluated whatever
#: the sampling rate and kept out of traffic counts (``app/calibration.py``). With
#: ``sampling.key: message_key``, a keyed canary message also needs a Kafka header of this
#: name (any value), since the key decides before the message is read.
CANARY_ATTRIBUTE = "evalstream.canary"
#: A canary's gold answer for one evaluator: ``evalstream.gold.<evaluator name>`` =
#: ``true``/``false`` (binary: ``true`` is the desirable outcome) or a class label.
GOLD_ATTRIBUTE_PREFIX = "evalstream.gold."


def utcnow() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def dump_json(obj: Any) -> bytes:
    """Serialise a model or plain value to compact JSON bytes."""
    if isinstance(obj, BaseModel):
        return obj.__pydantic_serializer__.to_json(obj, exclude_none=False)
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)


def load_json(data: bytes | str) -> Any:
    """Parse JSON bytes strictly (raises ``orjson.JSONDecodeError``, a ``ValueError``)."""
    return orjson.loads(data)


_HASH_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


def stable_hash(*parts: Any, length: int = 32) -> str:
    """A stable hex digest of JSON-serialisable parts (sorted keys), for ids and cache keys."""
    payload = orjson.dumps(parts, option=_HASH_OPTIONS)
    return hashlib.blake2b(payload, digest_size=length // 2).hexdigest()


class Record(Protocol):
    """One consumed Kafka message, before decoding, as every stage reads it.

    aiokafka's ``ConsumerRecord`` has exactly these attributes, so the Kafka source hands
    its records on as they are: at ~100k messages/s, copying each into a second object
    cost about a sixth of the worker's whole skip path (bench/throughput.py).
    """

    @property
    def topic(self) -> str:
        """The topic the message was read from."""
        ...

    @property
    def partition(self) -> int:
        """Its partition of ``topic``."""
        ...

    @property
    def offset(self) -> int:
        """Its offset in the partition (what commits are counted in)."""
        ...

    @property
    def key(self) -> bytes | None:
        """The message key, None when keyless (``sampling.key: message_key`` reads it)."""
        ...

    @property
    def value(self) -> bytes | None:
        """The payload the decoders read; None for a tombstone."""
        ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]:
        """Kafka headers as (name, value) pairs, in the order they were sent."""
        ...

    @property
    def timestamp(self) -> int | None:
        """Milliseconds since the epoch (the record's Kafka timestamp), if known."""
        ...


class RawRecord:
    """A :class:`Record` built in memory (unit tests, the memory source). Read-only by
    convention; a plain slots class, cheap to build."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp", "topic", "value")

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None,
                 key: bytes | None = None, headers: tuple[tuple[str, bytes], ...] = (),
                 timestamp: int | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.value = value
        self.key = key
        self.headers = headers
        self.timestamp = timestamp

    def _fields(self) -> tuple[Any, ...]:
        return (self.topic, self.partition, self.offset, self.value, self.key, self.headers,
                self.timestamp)

    def __eq__(self, other: object) -> bool:
        if type(other) is not RawRecord:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        # The value is user content: show its size, never the bytes.
        size = None if self.value is None else len(self.value)
        return (f"RawRecord(topic={self.topic!r}, partition={self.partition}, "
                f"offset={self.offset}, value=<{size} bytes>)")


class Message(BaseModel):
    """One chat turn."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    role: str
    content: str


class TraceEvent(BaseModel):
    """One normalised LLM interaction, whatever format it arrived in."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    trace_id: str = ""
    span_id: str = ""
    session_id: str | None = None
    app: str | None = None
    system_prompt: str | None = None
    messages: tuple[Message, ...] = ()
    input: str | None = None
    output: str | None = None
    context: tuple[str, ...] = ()
    reference: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)
    timestamp: datetime | None = None


#: How an LLM judge gave an answer's probabilities (``JudgeInfo.probabilities_from``).
ProbabilitySource = Literal["logprobs", "json", "mixed"]


def combine_sources(first: ProbabilitySource | None,
                    second: ProbabilitySource | None) -> ProbabilitySource | None:
    """How two answers that make one score gave their probabilities, together: the one
    way both used, ``mixed`` when they differ, None when neither came from an LLM."""
    if first is None or first == second:
        return second
    if second is None:
        return first
    return "mixed"


class JudgeInfo(BaseModel):
    """Which judge produced a score and what it cost."""

    # No NaN or infinity (a plugin judge's): JSON has none, and pydantic would write null
    # where the schema promises a number.
    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    backend: str
    model: str | None = None
    latency_ms: float = 0.0
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    escalated: bool = False
    #: A cascade kept its first judge's unsure answer because the judge it escalates to
    #: had reached its spend cap (the cascade decision ``capped``).
    capped: bool = False
    #: How an LLM judge gave ``probabilities``: ``logprobs`` (its first answer token's
    #: log-probabilities, a graded probability), ``json`` (a stated answer in JSON: 1 for
    #: the option named, 0 for the rest), ``mixed`` (several questions, answered both
    #: ways). None where no LLM answered a closed question (the builtin judge, generated
    #: text, an error before any answer). ``logprobs: auto`` falls back to JSON answers
    #: when a backend gives no logprobs, so this is what tells the two apart.
    probabilities_from: ProbabilitySource | None = None

    def plus_spend(self, other: JudgeInfo, **flags: bool) -> JudgeInfo:
        """This judge's info with ``other``'s spend added (latency, requests, tokens, USD),
        and ``flags`` (``cached``, ``escalated``, ``capped``) set: the one place a call's
        cost is added to another's."""
        return self.model_copy(update={
            "latency_ms": self.latency_ms + other.latency_ms,
            "requests": self.requests + other.requests,
            "tokens_in": self.tokens_in + other.tokens_in,
            "tokens_out": self.tokens_out + other.tokens_out,
            "cost_usd": self.cost_usd + other.cost_usd,
            **flags,
        })

    def plus_answers(self, other: JudgeInfo, **flags: bool) -> JudgeInfo:
        """:meth:`plus_spend` for two calls that both gave the score (turns of one
        conversation, a role extraction and the question about it): ``probabilities_from``
        names how both answered, ``mixed`` when they answered differently. (A cascade's
        escalation adds spend only: its score is the second judge's alone.)"""
        merged = self.plus_spend(other, **flags)
        both = combine_sources(self.probabilities_from, other.probabilities_from)
        if both == self.probabilities_from:
            return merged
        return merged.model_copy(update={"probabilities_from": both})


class EvalResult(BaseModel):
    """One score for one (event, evaluator), published as JSON on the results topic.

    Field names follow the OpenTelemetry ``gen_ai.evaluation.result`` event where one
    exists: ``evaluator`` is ``gen_ai.evaluation.name``, ``score``/``label`` are
    ``gen_ai.evaluation.score.value``/``.label`` and ``reason`` is the explanation.
    """

    # No NaN or infinity in any number field (a plugin's score): JSON has none, and pydantic
    # wrote them as null, a silent null for ``raw_score`` and a schema violation in
    # ``probabilities``. A result that holds one is refused, so the pipeline publishes an
    # error result naming the field instead (``invalid score fields``).
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    schema_version: str = SCHEMA_VERSION
    result_id: str
    event_id: str
    trace_id: str
    span_id: str = ""
    session_id: str | None = None
    app: str | None = None
    #: The event attributes named in ``results.attributes`` (empty unless configured).
    attributes: dict[str, str] = Field(default_factory=dict)
    route: str
    evaluator: str
    #: The version of the scoring that gave this result: the evaluator's own version, then
    #: ``+`` and the config's ``version`` when set (``"1"``, ``"1+2"``). Part of
    #: ``result_id``: re-scoring after a version change gives new ids. ``"1"`` in results
    #: from before schema 1.1, which had no versions.
    evaluator_version: str = "1"
    score: float | None = Field(default=None, ge=0.0, le=1.0)
    label: str | None = None
    passed: bool | None = None
    threshold: float | None = None
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    probabilities: dict[str, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        default_factory=dict)
    raw_score: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    judge: JudgeInfo | None = None
    sample_rate: float = Field(default=1.0, gt=0.0, le=1.0)
    event_time: datetime | None = None
    evaluated_at: datetime = Field(default_factory=utcnow)
    #: The event was a canary (``evalstream.canary: "true"``): evaluated whatever the sampling
    #: rate (``sample_rate`` is then 1), never counted as traffic. False in results from
    #: before schema 1.2.
    canary: bool = False
    #: A canary's gold answer for this evaluator as given (``"true"``/``"false"`` or a
    #: class label), when it had a valid one; None otherwise.
    gold: str | None = None


_SCHEMA_MAJOR = SCHEMA_VERSION.split(".", 1)[0]


def read_result(data: bytes | str) -> EvalResult:
    """A result as published on the results topic, read as a consumer reads it.

    A later minor schema version only adds fields, so those are ignored: a reader older
    than the workers (``join-labels`` during an upgrade) keeps reading. ``EvalResult``
    itself forbids unknown fields, which is right for what the worker writes but would
    refuse every newer result. A later major version may have renamed or retyped a field,
    so it is refused rather than read as this one.

    Raises:
        ValueError: not a result of this major schema version (pydantic's
            ``ValidationError`` is a ``ValueError``).
    """
    body = load_json(data)
    if type(body) is dict:
        # ``JudgeInfo`` ignores unknown fields of its own.
        body = {k: v for k, v in body.items() if k in EvalResult.model_fields}
    result = EvalResult.model_validate(body)
    if result.schema_version.split(".", 1)[0] != _SCHEMA_MAJOR:
        raise ValueError(f"schema_version {result.schema_version[:20]!r}: this release "
                         f"reads {_SCHEMA_MAJOR}.x")
    return result


def result_id(event_id: str, route: str, evaluator: str, evaluator_config: Any) -> str:
    """The id of a result: the same event scored on the same route by the same evaluator
    config gets the same id. The route is part of it: with ``routing: all`` two routes may
    run the same evaluator config on one event, and their results are not duplicates.
    ``evaluator_config`` is everything that decides the score (``_bind`` in ``app/bindings.py``:
    the evaluator spec, its versions, its judge's identity)."""
    return stable_hash(event_id, route, evaluator, evaluator_config)


def result_ids(route: str, evaluator: str, evaluator_config: Any) -> Callable[[str], str]:
    """``result_id`` for one route's evaluator config, serialised once (hot path).

    ``stable_hash`` hashes the compact JSON array ``[event_id, route, evaluator, config]``;
    only the event id changes from result to result, so the rest is written once here.
    """
    tail = b"," + orjson.dumps([route, evaluator, evaluator_config], option=_HASH_OPTIONS)[1:]

    def result_id_of(event_id: str) -> str:
        payload = b"[" + orjson.dumps(event_id) + tail
        return hashlib.blake2b(payload, digest_size=16).hexdigest()

    return result_id_of


class Alert(BaseModel):
    """A drift alert, published on the alerts topic when it fires and when it resolves."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: str = SCHEMA_VERSION
    alert_id: str
    state: Literal["firing", "resolved"]
    route: str
    evaluator: str
    kind: str
    severity: Literal["info", "warning", "critical"] = "warning"
    baseline: float | None = None
    current: float | None = None
    interval: tuple[float, float] | None = None
    n: int = 0
    statistic: float | None = None
    threshold: float | None = None
    first_seen: datetime
    at: datetime = Field(default_factory=utcnow)
    summary: str = ""


def eval_result_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``EvalResult`` as published (``schemas/eval_result.schema.json``)."""
    schema = EvalResult.model_json_schema(mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://evalstream.dev/schemas/eval_result/{SCHEMA_VERSION}.json"
    return schema
