"""Span -> TraceEvent extraction shared by the ``otlp_proto`` and ``otlp_json`` decoders.

A decoder walks its message (resource -> scope -> span) and hands each span to a
:class:`BatchBuilder` as a :class:`~.span_view.SpanView`: raw attributes plus a converter
for their values. Values are converted only when read, so a span that is skipped (most of
them in production: tool and retrieval spans, chat spans without captured content) costs a
dict build and a few lookups, not a full conversion.

A chat span becomes one :class:`~evalstream.events.TraceEvent`:

* ``event_id`` = ``<trace_id>-<span_id>`` (lowercase hex), so a re-exported span gets the
  same result ids;
* content from the first convention the span carries (see :mod:`.genai_spans`);
  ``input`` = last user message, ``messages`` = the non-system input turns, ``output`` =
  the first choice's text, ``system_prompt`` = system instructions / system messages;
* ``context`` = documents on the span, else those of retrieval spans of the same trace in
  the same message that ended before it (in end-time order), at most
  :data:`MAX_CONTEXT_DOCUMENTS` documents and :data:`MAX_CONTEXT_CHARS` characters (see
  :mod:`.trace_context`);
* ``session_id`` from the configured attribute, ``gen_ai.conversation.id``,
  ``session.id`` or traceloop-sdk's ``traceloop.association.properties.session_id`` (span,
  then resource); ``app`` from the configured attribute or the
  resource's ``service.name`` (``openinference.project.name`` when that is missing or the
  SDK's ``unknown_service`` default);
* ``attributes`` (flat strings, for routing and metrics): ``operation``, ``provider``,
  ``model``, ``response_model``, ``input_tokens``, ``output_tokens``, ``finish_reasons``,
  ``response_id``, ``agent_name``, ``user_id``, ``environment``, ``span_name`` when present,
  plus the topic's ``attribute_map`` and the names the configuration reads (``carry`` in
  :func:`record_decoder`), and on a span carrying ``evalstream.canary`` that
  attribute and its ``evalstream.gold.*`` ones (a canary's marker and gold answers).

Spans that are not evaluated are counted in ``Decoded.skipped``: ``not_genai`` (no GenAI
marker at all), ``not_llm`` (tool, retrieval, agent, embedding... spans), ``no_content``
(content capture off), ``error_span`` (status ERROR: the call failed), ``bad_span``
(malformed ids, all-zero ones included, or content), ``duplicate_span`` (a chat span whose
child chat span in the same message has the same input and output), ``too_many_events``
(chat spans past :data:`MAX_EVENTS_PER_MESSAGE`), ``too_many_spans`` (spans past
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

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import CANARY_ATTRIBUTE, GOLD_ATTRIBUTE_PREFIX, Message, Record, TraceEvent
from evalstream.formats.base import Decoded, Decoder, record_time_ms
from evalstream.formats.genai_messages import BadSpanError, Content, retrieval_documents
from evalstream.formats.genai_spans import classify, read_content
from evalstream.formats.span_view import Options, Resource, SpanView, flat_text
from evalstream.formats.trace_context import (
    MAX_CONTEXT_CHARS,
    MAX_CONTEXT_DOCUMENTS,
    TraceDocuments,
    bounded_context,
)

# The context bounds and Options are re-exported: tests and callers name them from here.
__all__ = ["EVENT_ATTRIBUTES", "MAX_CONTAINERS_PER_MESSAGE", "MAX_CONTEXT_CHARS",
           "MAX_CONTEXT_DOCUMENTS", "MAX_EVENTS_PER_MESSAGE", "MAX_SPANS_PER_MESSAGE",
           "BatchBuilder", "Options", "check_containers", "record_decoder"]

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
    ("user_id", ("user.id", "enduser.id", "traceloop.association.properties.user_id")),
)
#: The ``TraceEvent.attributes`` names an OTLP event gets from the decoder itself (when the
#: span has a value for them); any other name must be carried (``attribute_map``, or the
#: names the configuration reads: see :func:`record_decoder`).
EVENT_ATTRIBUTES = frozenset({"operation", *(name for name, _ in _SPAN_ATTRIBUTES),
                              "finish_reasons", "environment", "span_name"})
#: What reading a malformed span can raise (out-of-range times raise OverflowError,
#: absurdly nested values RecursionError).
_MALFORMED = (BadSpanError, ValueError, TypeError, KeyError, AttributeError, IndexError,
              ArithmeticError, RecursionError)


def _timestamp(ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=ns // 1000)


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
        operation, reason = classify(attrs, self._options.llm_operations)
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
        content = read_content(span)
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
            "context": bounded_context(retrieval_documents(attrs.get)),
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
                        text = flat_text(text)
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
        if raw_get(CANARY_ATTRIBUTE) is not None:
            # A canary (app/calibration.py): its marker and gold answers ride along. One
            # lookup for every other span.
            for key in attrs.raw:
                if key == CANARY_ATTRIBUTE or key.startswith(GOLD_ATTRIBUTE_PREFIX):
                    text = attrs.first_text((key,))
                    if text is not None:
                        out[key] = text
        return out

    def skip(self, reason: str, count: int = 1) -> None:
        """Count ``count`` spans (or what a decoder reads as one: a log record, a call's
        records) seen but not made into events, as ``reason``."""
        self.spans += count
        self.skipped[reason] += count

    def add_bad(self, count: int = 1) -> None:
        """Count spans (or containers of spans) too malformed to look at."""
        self.skip("bad_span", count)

    def room(self) -> int:
        """How many more spans may be added before :data:`MAX_SPANS_PER_MESSAGE`."""
        return max(0, MAX_SPANS_PER_MESSAGE - self.spans)

    def add_excess(self, count: int) -> None:
        """Count ``count`` spans past :data:`MAX_SPANS_PER_MESSAGE`, not looked at."""
        if count > 0:
            self.skip("too_many_spans", count)

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
        traces: dict[str, TraceDocuments] = {}
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
                        trace = traces[pending.trace_id] = TraceDocuments(docs)
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
                   decode: Callable[[bytes, Options, int | None], Decoded],
                   carry: Iterable[str] = ()) -> Decoder:
    """The ``Decoder`` of an OTLP topic: its options resolved once, tombstones rejected,
    and ``decode(value, options, record_timestamp_ms)`` for everything else.

    Args:
        topic: The input.
        decode: The encoding's decode function.
        carry: Event attribute names the configuration reads (route matches,
            ``results.attributes``, evaluator params). Each one the decoder does not set
            itself (:data:`EVENT_ATTRIBUTES`) or get from ``attribute_map`` is carried from
            the span (else resource) attribute of the same key: without it, a route
            matching ``tenant`` on an OTLP input never matched, and said nothing.
    """
    options = Options.from_topic(topic, [n for n in carry if n not in EVENT_ATTRIBUTES])

    def decoder(record: Record) -> Decoded:
        if record.value is None:
            raise DecodeError("empty_message", "message has no value (tombstone)")
        return decode(record.value, options, record_time_ms(record.timestamp))

    return decoder
