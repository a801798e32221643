"""Span -> TraceEvent extraction shared by the ``otlp_proto`` and ``otlp_json`` decoders.

A decoder walks its message (resource -> scope -> span) and hands each span to a
:class:`BatchBuilder` as a :class:`SpanView`: raw attributes plus a converter for their
values. Values are converted only when read, so a span that is skipped (most of them in
production: tool and retrieval spans, chat spans without captured content) costs a dict
build and a few lookups, not a full conversion.

A chat span becomes one :class:`~evalstream.events.TraceEvent`:

* ``event_id`` = ``<trace_id>-<span_id>`` (lowercase hex), so a re-exported span gets the
  same result ids;
* content from the first convention the span carries (see :mod:`.genai_messages`);
  ``input`` = last user message, ``messages`` = the non-system input turns, ``output`` =
  the first choice's text, ``system_prompt`` = system instructions / system messages;
* ``context`` = documents on the span, else those of retrieval spans of the same trace in
  the same message that ended before it (in end-time order), at most
  :data:`MAX_CONTEXT_DOCUMENTS` documents and :data:`MAX_CONTEXT_CHARS` characters;
* ``session_id`` from the configured attribute, ``gen_ai.conversation.id`` or
  ``session.id`` (span, then resource); ``app`` from the configured attribute or the
  resource's ``service.name`` (``openinference.project.name`` when that is missing or the
  SDK's ``unknown_service`` default);
* ``attributes`` (flat strings, for routing and metrics): ``operation``, ``provider``,
  ``model``, ``response_model``, ``input_tokens``, ``output_tokens``, ``finish_reasons``,
  ``response_id``, ``agent_name``, ``user_id``, ``environment``, ``span_name`` when present,
  plus the topic's ``attribute_map``.

Spans that are not evaluated are counted in ``Decoded.skipped``: ``not_genai`` (no GenAI
marker at all), ``not_llm`` (tool, retrieval, agent, embedding... spans), ``no_content``
(content capture off), ``error_span`` (status ERROR: the call failed), ``bad_span``
(malformed ids or content), ``duplicate_span`` (a chat span whose child chat span in the
same message has the same input and output), ``too_many_events`` (chat spans past
:data:`MAX_EVENTS_PER_MESSAGE`), ``too_many_spans`` (spans past
:data:`MAX_SPANS_PER_MESSAGE`, not looked at); a message without any span counts once as
``empty_batch``. Only a message that is not OTLP at all raises ``DecodeError`` (-> dead
letter); that is the decoders' business, not this module's, except the shared bound
:func:`check_containers` (``too_many_containers``).

Work and memory per message are linear in its size: inherited context is bounded per event
(its strings are shared between events, never copied), resource-level values are resolved
once per resource, and the caps bound what one message can cost whatever
``worker.max_message_bytes`` is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import Message, Record, TraceEvent
from evalstream.formats.base import Decoded, Decoder
from evalstream.formats.genai_messages import (
    AttrGetter,
    BadSpanError,
    Content,
    read_legacy,
    read_openinference,
    read_semconv,
    read_semconv_events,
    retrieval_documents,
)

__all__ = ["MAX_CONTAINERS_PER_MESSAGE", "MAX_CONTEXT_CHARS", "MAX_CONTEXT_DOCUMENTS",
           "MAX_EVENTS_PER_MESSAGE", "MAX_SPANS_PER_MESSAGE", "Attrs", "BadSpanError",
           "BatchBuilder", "Options", "Resource", "SpanView", "check_containers",
           "record_decoder"]

#: Bounds on one event's ``context``. The evaluators that read it (RAG groundedness and
#: relevancy, custom prompts) send at most ``max_chars`` (<= 200,000) of it, split between
#: the documents, so more is never read. Without a bound, context inherited from a trace's
#: retrieval spans is a documents x chat spans product: one retriever span with 10,000 tiny
#: documents and 1,000 small chat spans (a 300 KB message) made 10 million references.
MAX_CONTEXT_DOCUMENTS = 32
MAX_CONTEXT_CHARS = 200_000
#: Chat spans of one message turned into events; later ones are counted as
#: ``too_many_events``. An event costs ~3 KB of Python objects even when its span is ~100
#: bytes on the wire, so this bounds a message's memory whatever ``max_message_bytes`` is.
#: Real batches (Collector ``send_batch_size`` 8192, mostly spans without content) stay
#: far below it.
MAX_EVENTS_PER_MESSAGE = 5_000
#: Spans of one message looked at; the decoders count the rest as ``too_many_spans``
#: without building anything for them. An empty span is 2 bytes of protobuf, so a 1 MB
#: message could hold 500,000 of them, ~2.5 s of Python blocking the event loop.
MAX_SPANS_PER_MESSAGE = 20_000
#: Resources + scopes of one message; past it the message is dead-lettered as
#: ``too_many_containers`` before anything is built (see :func:`check_containers`). Visiting
#: a container costs about as much Python as an empty span, but empty containers never reach
#: the span cap: a 1 MB message of 500,000 empty ResourceSpans took 0.8 s on the event loop.
#: Twice the span cap because every resource or scope that holds spans holds at least one,
#: so a message without empty containers is only rejected once it is past the span cap
#: anyway. (A Collector gateway appends its senders' ResourceSpans unmerged, so a legitimate
#: batch of 8,192 one-span requests holds 16,384 containers: a tighter cap would reject it.)
MAX_CONTAINERS_PER_MESSAGE = 2 * MAX_SPANS_PER_MESSAGE

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Where the kind of span is declared, most specific first.
_KIND_KEYS = ("gen_ai.operation.name", "llm.request.type", "openinference.span.kind")
#: Any of these without a declared kind still marks a model call (semconv <= 1.26 had no
#: operation name; flattened prompts may come without ``llm.request.type``).
_LLM_MARKERS = (
    "gen_ai.provider.name", "gen_ai.system", "gen_ai.request.model", "gen_ai.input.messages",
    "gen_ai.output.messages", "gen_ai.prompt.0.content", "gen_ai.prompt.0.role",
    "gen_ai.completion.0.content", "llm.model_name", "llm.input_messages.0.message.role",
    "gen_ai.prompt.0.user",
)
#: A span without any of these (and without events) carries no content: no reader can
#: find any, so they are not run.
_CONTENT_KEYS = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.prompt.0.user",
    "gen_ai.completion.0.content",
    "gen_ai.completion.0.role", "gen_ai.completion.0.finish_reason",
    "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.input_messages.0.message.contents.0.message_content.text",
    "llm.input_messages.0.message.contents.0.message_content.type",
    "llm.output_messages.0.message.role", "llm.output_messages.0.message.content",
    "llm.output_messages.0.message.contents.0.message_content.text",
    "llm.output_messages.0.message.contents.0.message_content.type",
    "input.value", "output.value",
})
_SESSION_KEYS = ("gen_ai.conversation.id", "session.id")
#: TraceEvent.attributes name -> span attribute keys tried in order.
_SPAN_ATTRIBUTES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("provider", ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")),
    ("model", ("gen_ai.request.model", "llm.model_name", "gen_ai.response.model")),
    ("response_model", ("gen_ai.response.model",)),
    ("input_tokens", ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens",
                      "llm.token_count.prompt")),
    ("output_tokens", ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                       "llm.token_count.completion")),
    ("response_id", ("gen_ai.response.id",)),
    ("agent_name", ("gen_ai.agent.name",)),
    ("user_id", ("user.id", "enduser.id")),
)
_ENVIRONMENT_KEYS = ("deployment.environment.name", "deployment.environment")
#: What reading a malformed span can raise (out-of-range times raise OverflowError,
#: absurdly nested values RecursionError).
_MALFORMED = (BadSpanError, ValueError, TypeError, KeyError, AttributeError, IndexError,
              ArithmeticError, RecursionError)


def _text(value: Any) -> str:
    """A flat string for an attribute value (lists comma-joined, booleans lowercase)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


class Attrs:
    """Raw attributes by key, with lazy conversion of values to plain Python."""

    __slots__ = ("convert", "raw")

    def __init__(self, raw: dict[str, Any], convert: Callable[[Any], Any]) -> None:
        self.raw = raw
        self.convert = convert

    def get(self, key: str) -> Any:
        """The converted value of ``key``, or ``None``."""
        raw = self.raw.get(key)
        return None if raw is None else self.convert(raw)

    def first_text(self, keys: tuple[str, ...]) -> str | None:
        """The first of ``keys`` present, as a non-empty flat string."""
        raw_get = self.raw.get
        for key in keys:
            value = raw_get(key)
            if value is not None:
                text = self.convert(value)
                if type(text) is not str:
                    text = _text(text)
                if text:
                    return text
        return None


@dataclass(frozen=True, slots=True)
class Options:
    """Per-topic extraction settings, resolved once from the :class:`InputTopic`."""

    llm_operations: frozenset[str]
    session_keys: tuple[str, ...]
    app_keys: tuple[str, ...]
    attribute_map: tuple[tuple[str, str], ...]

    @classmethod
    def from_topic(cls, topic: InputTopic) -> Options:
        """Options for ``topic``."""
        session = (topic.session_attribute,) if topic.session_attribute else ()
        return cls(
            llm_operations=frozenset(op.lower() for op in topic.llm_operations),
            session_keys=(*session, *_SESSION_KEYS),
            app_keys=(topic.app_attribute,) if topic.app_attribute else (),
            attribute_map=tuple(topic.attribute_map.items()),
        )


class Resource:
    """What a resource contributes to each of its spans' events (resolved once: a resource
    value converted per event would cost its size times the number of events)."""

    __slots__ = ("app", "attrs", "environment", "mapped", "session_id")

    def __init__(self, attrs: Attrs, options: Options) -> None:
        self.attrs = attrs
        self.app = attrs.first_text(options.app_keys) if options.app_keys else None
        if self.app is None:
            service = attrs.first_text(("service.name",))
            if service is None or service.startswith("unknown_service"):
                # Phoenix's register(project_name=...) names the app only as its project,
                # leaving the SDK's default "unknown_service:python".
                self.app = attrs.first_text(("openinference.project.name",)) or service
            else:
                self.app = service
        self.session_id = attrs.first_text(options.session_keys)
        self.environment = attrs.first_text(_ENVIRONMENT_KEYS)
        #: The topic's ``attribute_map`` values found on the resource, by output name.
        self.mapped: dict[str, str] = {}
        for out_name, key in options.attribute_map:
            value = attrs.first_text((key,))
            if value is not None:
                self.mapped[out_name] = value


class SpanView(Attrs, ABC):
    """One span as the extractor needs it: its attributes (the :class:`Attrs` part, set by
    the subclass constructor) and accessors implemented by each OTLP encoding. One object
    per span, no more: this is allocated for every span of every message."""

    __slots__ = ()

    @abstractmethod
    def ids(self) -> tuple[str, str]:
        """(trace_id, span_id) as lowercase hex; raises ``BadSpanError`` when invalid."""

    @abstractmethod
    def times(self) -> tuple[int, int]:
        """(start, end) in Unix nanoseconds (0 when unset)."""

    @abstractmethod
    def name(self) -> str:
        """The span name."""

    @abstractmethod
    def failed(self) -> bool:
        """Whether the span's status is ERROR (the call failed)."""

    @abstractmethod
    def parent_id(self) -> str:
        """The parent span id as lowercase hex, ``""`` for a root span."""

    @abstractmethod
    def has_events(self) -> bool:
        """Whether the span has events (cheap; :meth:`events` builds them)."""

    @abstractmethod
    def events(self) -> list[tuple[str, AttrGetter]]:
        """The span's events as (name, attribute getter)."""


def _classify(attrs: Attrs, kinds: frozenset[str]) -> tuple[str | None, str | None]:
    """(operation, skip reason); reason ``None`` means "a model call to evaluate"."""
    raw = attrs.raw
    for key in _KIND_KEYS:
        if key in raw:
            operation = _text(attrs.get(key)).lower()
            return operation, (None if operation in kinds else "not_llm")
    if "traceloop.span.kind" in raw:  # OpenLLMetry workflow/task/agent/tool spans
        return None, "not_llm"
    for key in _LLM_MARKERS:
        if key in raw:
            return None, None
    return None, "not_genai"


def _read_content(span: SpanView) -> Content | None:
    """Content from the first convention the span carries, newest first."""
    if _CONTENT_KEYS.isdisjoint(span.raw) and not span.has_events():
        return None  # the common case in production: content capture is off
    get = span.get
    found = read_semconv(get)
    if found is None or found.empty():
        found = read_semconv_events(span.events())
    if found is None or found.empty():
        found = read_legacy(get)
    if found is None or found.empty():
        found = read_openinference(get)
    return None if found is None or found.empty() else found


def _timestamp(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


def _bounded(docs: Iterable[str]) -> tuple[str, ...]:
    """The first documents within :data:`MAX_CONTEXT_DOCUMENTS` / :data:`MAX_CONTEXT_CHARS`
    (the one that crosses the character bound is cut to it). Stops reading at the bound."""
    kept: list[str] = []
    room = MAX_CONTEXT_CHARS
    for doc in docs:
        if len(kept) == MAX_CONTEXT_DOCUMENTS or room <= 0:
            break
        if len(doc) > room:
            doc = doc[:room]
        kept.append(doc)
        room -= len(doc)
    return tuple(kept)


def _end(entry: tuple[int, str]) -> int:
    return entry[0]


class _TraceDocuments:
    """The retrieval documents of one trace, handed to its chat spans as context.

    Documents are put in end-time order once (stable: message order for spans that ended
    together, rank order within a span), so the documents that ended before a chat span
    are a prefix, found by bisection, and its context is the bounded head of that prefix.
    Equal prefixes share one tuple. (Pydantic rebuilds a ``tuple[str, ...]`` field when it
    validates a TraceEvent, so each event still holds its own tuple, but of at most
    :data:`MAX_CONTEXT_DOCUMENTS` references to the same strings.)
    """

    __slots__ = ("_bounded", "_ends", "_prefixes")

    def __init__(self, docs: list[tuple[int, str]]) -> None:
        docs.sort(key=_end)
        self._ends = [end for end, _ in docs]
        self._bounded = _bounded(doc for _, doc in docs)
        self._prefixes: dict[int, tuple[str, ...]] = {}

    def before(self, end_ns: int) -> tuple[str, ...]:
        """The bounded context of a chat span that ended at ``end_ns``."""
        count = bisect_right(self._ends, end_ns)
        bounded = self._bounded
        if count >= len(bounded):
            return bounded
        # Shorter than the bound: all ``count`` documents, none of them cut.
        found = self._prefixes.get(count)
        if found is None:
            found = self._prefixes[count] = bounded[:count]
        return found


@dataclass(slots=True)
class _Pending:
    fields: dict[str, Any]
    trace_id: str
    end_ns: int
    span_id: str
    parent_id: str

    def key(self) -> tuple[str, str | None, str | None]:
        """What makes two nested spans the same model call twice."""
        fields = self.fields
        return self.trace_id, fields["input"], fields["output"]


class BatchBuilder:
    """Collects the events and skips of one message."""

    __slots__ = ("_docs", "_options", "_pending", "_record_ms", "skipped", "spans")

    def __init__(self, options: Options, record_timestamp_ms: int | None = None) -> None:
        self._options = options
        self._record_ms = record_timestamp_ms
        self._pending: list[_Pending] = []
        #: trace_id -> [(end_ns, document)] from retrieval spans, for chat spans' context.
        self._docs: dict[str, list[tuple[int, str]]] = {}
        self.skipped: Counter[str] = Counter()
        self.spans = 0

    def add(self, span: SpanView, resource: Resource) -> None:
        """Turn ``span`` into a pending event or count why not. Never raises on bad data."""
        self.spans += 1
        try:
            self._add(span, resource)
        except _MALFORMED:
            # A malformed span must not cost its batch-mates: skip it, visibly.
            self.skipped["bad_span"] += 1

    def _add(self, span: SpanView, resource: Resource) -> None:
        attrs = span
        operation, reason = _classify(attrs, self._options.llm_operations)
        if reason is not None:
            if reason == "not_llm":
                self._keep_documents(span)
            self.skipped[reason] += 1
            return
        if span.failed():
            # A failed call (rate limit, timeout, cut stream) has no answer, or a partial
            # one: judging it would score the outage, not the model.
            self.skipped["error_span"] += 1
            return
        if len(self._pending) >= MAX_EVENTS_PER_MESSAGE:
            self.skipped["too_many_events"] += 1
            return
        content = _read_content(span)
        if content is None or not (content.turns or content.outputs):
            self.skipped["no_content"] += 1
            return
        trace_id, span_id = span.ids()
        start_ns, end_ns = span.times()
        self._pending.append(_Pending(
            self._fields(span, resource, content, operation, trace_id, span_id, end_ns or start_ns),
            trace_id, end_ns or start_ns, span_id, span.parent_id()))

    def _keep_documents(self, span: SpanView) -> None:
        docs = retrieval_documents(span.get)
        if docs:
            trace_id, _ = span.ids()
            start_ns, end_ns = span.times()
            self._docs.setdefault(trace_id, []).extend((end_ns or start_ns, d) for d in docs)

    def _fields(self, span: SpanView, resource: Resource, content: Content,
                operation: str | None, trace_id: str, span_id: str, ns: int) -> dict[str, Any]:
        attrs = span
        options = self._options
        last_user = None
        for role, text in reversed(content.turns):
            # Whitespace is not a question (a tool loop may leave an empty user turn).
            if role == "user" and not text.isspace():
                last_user = text
                break
        attributes = self._attributes(span, resource, content, operation)
        timestamp = None
        if ns:
            timestamp = _timestamp(ns)
        elif self._record_ms is not None:
            timestamp = _timestamp(self._record_ms * 1_000_000)
        return {
            "event_id": f"{trace_id}-{span_id}",
            "trace_id": trace_id,
            "span_id": span_id,
            "session_id": attrs.first_text(options.session_keys) or resource.session_id,
            "app": ((attrs.first_text(options.app_keys) if options.app_keys else None)
                    or resource.app),
            "system_prompt": "\n\n".join(dict.fromkeys(content.system)) or None,
            "messages": tuple(Message(role=r, content=t) for r, t in content.turns),
            "input": last_user,
            "output": content.outputs[0] if content.outputs else None,
            "context": _bounded(retrieval_documents(attrs.get)),
            "attributes": attributes,
            "timestamp": timestamp,
        }

    def _attributes(self, span: SpanView, resource: Resource, content: Content,
                    operation: str | None) -> dict[str, str]:
        attrs = span
        raw_get = attrs.raw.get
        convert = attrs.convert
        out: dict[str, str] = {"operation": operation} if operation else {}
        # Inlined lookups: this runs for every evaluated span.
        for name, keys in _SPAN_ATTRIBUTES:
            for key in keys:
                value = raw_get(key)
                if value is not None:
                    text = convert(value)
                    if type(text) is not str:
                        text = _text(text)
                    if text:
                        out[name] = text
                        break
        finish = attrs.first_text(("gen_ai.response.finish_reasons",))
        if finish is None and content.finish_reasons:
            finish = ",".join(content.finish_reasons)
        if finish:
            out["finish_reasons"] = finish
        if resource.environment:
            out["environment"] = resource.environment
        name = span.name()
        if name:
            out["span_name"] = name
        mapped = resource.mapped
        for out_name, key in self._options.attribute_map:
            value = attrs.first_text((key,)) or mapped.get(out_name)
            if value is not None:
                out[out_name] = value
        return out

    def add_bad(self, count: int = 1) -> None:
        """Count spans (or containers of spans) too malformed to look at."""
        self.spans += count
        self.skipped["bad_span"] += count

    def room(self) -> int:
        """How many more spans may be added before :data:`MAX_SPANS_PER_MESSAGE`."""
        return max(0, MAX_SPANS_PER_MESSAGE - self.spans)

    def add_excess(self, count: int) -> None:
        """Count ``count`` spans past :data:`MAX_SPANS_PER_MESSAGE`, not looked at."""
        if count > 0:
            self.spans += count
            self.skipped["too_many_spans"] += count

    def _nested_calls(self) -> set[tuple[str, tuple[str, str | None, str | None]]]:
        """(parent span id, call key) of each chat span whose parent is in this message: a
        parent with the same key wraps the same model call. (Span ids are random 64-bit
        numbers, so one is not shared across the traces of a message; the key has the
        trace id anyway.)"""
        pending = self._pending
        if len(pending) < 2:
            return set()
        ids = {p.span_id for p in pending}
        return {(p.parent_id, p.key()) for p in pending if p.parent_id in ids}

    def finish(self) -> Decoded:
        """The decoded events (retrieval context attached) and the skip counts.

        A message without any span is counted once as ``empty_batch``, so that every
        message leaves a trace in the metrics.
        """
        if self.spans == 0:
            self.skipped["empty_batch"] += 1
        events: list[TraceEvent] = []
        traces: dict[str, _TraceDocuments] = {}
        nested = self._nested_calls()
        for pending in self._pending:
            if nested and (pending.span_id, pending.key()) in nested:
                # A framework span (LangChain under Phoenix) around the provider's own span
                # of the same call: scoring both would count the answer twice.
                self.skipped["duplicate_span"] += 1
                continue
            fields = pending.fields
            if not fields["context"]:
                trace = traces.get(pending.trace_id)
                if trace is None:
                    docs = self._docs.get(pending.trace_id)
                    if docs:
                        trace = traces[pending.trace_id] = _TraceDocuments(docs)
                if trace is not None:
                    fields["context"] = trace.before(pending.end_ns)
            try:
                events.append(TraceEvent(**fields))
            except ValueError:  # pydantic's ValidationError; the fields are built typed
                self.skipped["bad_span"] += 1
        return Decoded(events=events, skipped=self.skipped)


def check_containers(resources: int, scopes: Iterable[int]) -> None:
    """Reject a message with more than :data:`MAX_CONTAINERS_PER_MESSAGE` resources + scopes.

    Args:
        resources: how many resource containers the message holds (a length, O(1)).
        scopes: the scope count of each resource, in order; read lazily and only until the
            cap is passed, so checking costs at most the cap's worth of containers.

    Raises:
        DecodeError: ``too_many_containers``. Such a message is mostly empty containers,
            or already past the span cap; it is dead-lettered whole (bytes kept, for a look
            or a replay) rather than partly decoded.
    """
    cap = MAX_CONTAINERS_PER_MESSAGE
    total = resources
    if total <= cap:
        for count in scopes:
            total += count
            if total > cap:
                break
    if total > cap:
        raise DecodeError("too_many_containers",
                          f"more than {cap} resources and scopes in one message")


def record_decoder(topic: InputTopic,
                   decode: Callable[[bytes, Options, int | None], Decoded]) -> Decoder:
    """The ``Decoder`` of an OTLP topic: its options resolved once, tombstones rejected,
    and ``decode(value, options, record_timestamp_ms)`` for everything else."""
    options = Options.from_topic(topic)

    def decoder(record: Record) -> Decoded:
        if record.value is None:
            raise DecodeError("empty_message", "message has no value (tombstone)")
        return decode(record.value, options, record.timestamp)

    return decoder
