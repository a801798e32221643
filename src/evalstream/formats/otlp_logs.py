"""GenAI content sent to the OpenTelemetry *logs* signal, shared by ``otlp_logs_proto`` and
``otlp_logs_json``.

OpenTelemetry's openai-v2 instrumentation in ``EVENT_ONLY`` capture mode and OpenLLMetry with
``use_attributes=False`` write chat content as log records (events), not span attributes;
the Collector's Kafka exporter sends those to its ``logs_topic``. A log record is an event
when it has an event name (``eventName``, or the ``event.name`` attribute older SDKs set):

* ``gen_ai.client.inference.operation.details`` (semconv >= 1.37): one model call, its
  attributes those of a chat span (messages, model, usage);
* ``gen_ai.{system,user,assistant,tool}.message`` / ``gen_ai.choice`` (semconv 1.28-1.36):
  one record per message, the body a map (``content``, ``message``, ``finish_reason``...).

The records of one message are grouped by (trace id, span id), i.e. by the call they
belong to, and each group is handed to :class:`~.genai.BatchBuilder` as one
:class:`~.span_view.SpanView`: its attributes are the records' (first record wins per key),
its span events the records themselves. So the span readers (:mod:`.genai_spans`,
:mod:`.genai_events`) read them, and an event gets the id ``<trace_id>-<span_id>`` its
span would give: the same call read from the traces topic de-duplicates with it.

Skipped records are counted in ``Decoded.skipped``: ``not_genai`` (an application log, or an
event of another name), ``no_span_id`` (a GenAI event outside any span, its span id absent
or all zeroes: it cannot be joined to its call; OpenLLMetry 0.62.4 writes a streamed
answer's ``gen_ai.choice`` that way),
``bad_span`` (a malformed record), ``too_many_spans`` (records past
:data:`~.genai.MAX_SPANS_PER_MESSAGE`, not looked at); a group is then counted as a span is
(``error_span`` when a record has ``error.type``, ``no_content``, ``not_llm``...), or as
``partial_call`` when its per-message records hold the prompt without the answer or the
answer without the prompt (the call's other records came in another message, or a failed
call wrote no answer and no ``error.type``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evalstream.formats.genai import MAX_SPANS_PER_MESSAGE, BatchBuilder
from evalstream.formats.genai_messages import AttrGetter
from evalstream.formats.span_view import Resource, SpanView

__all__ = ["GENAI_EVENTS", "Records"]

#: Event names whose records carry chat content (what :mod:`.genai_events` reads).
GENAI_EVENTS = frozenset({
    "gen_ai.client.inference.operation.details",
    "gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
    "gen_ai.tool.message", "gen_ai.choice",
    "gen_ai.content.prompt", "gen_ai.content.completion",
})
#: Where a failed call says so: semconv's ``error.type`` (set on the details event too).
_ERROR_KEY = "error.type"
#: The one record that is a whole call (semconv >= 1.37).
_DETAILS = "gen_ai.client.inference.operation.details"
#: Per-message records (semconv 1.28-1.36) of the call's answer; the others are its prompt.
_ANSWERS = frozenset({"gen_ai.choice", "gen_ai.content.completion"})


class _LogGroup(SpanView):
    """The GenAI event records of one call (same trace and span id), seen as its span."""

    __slots__ = ("_ids", "_ns", "_records")

    def __init__(self, trace_id: str, span_id: str, convert: Callable[[Any], Any]) -> None:
        self.raw: dict[str, Any] = {}
        self.convert = convert
        self._ids = (trace_id, span_id)
        self._ns = 0
        #: (event name, raw attributes, raw body or None) per record, in message order.
        self._records: list[tuple[str, dict[str, Any], Any]] = []

    def add(self, name: str, attrs: dict[str, Any], body: Any, ns: int) -> None:
        """Add one record: its attributes (not overriding earlier records'), its body (a raw
        ``AnyValue``, or None) and its time (Unix ns; the group's is its latest)."""
        raw = self.raw
        for key, value in attrs.items():
            if key not in raw:
                raw[key] = value
        self._records.append((name, attrs, body))
        if ns > self._ns:
            self._ns = ns

    def ids(self) -> tuple[str, str]:
        return self._ids

    def times(self) -> tuple[int, int]:
        # A log record is an instant: the call's last record (its answer) is its end.
        return self._ns, self._ns

    def name(self) -> str:
        return ""  # no span name: ``span_name`` stays unset rather than made up

    def failed(self) -> bool:
        return _ERROR_KEY in self.raw

    def parent_id(self) -> str:
        return ""  # unknown: records say which span they belong to, not its parent

    def has_events(self) -> bool:
        return bool(self._records)

    def partial(self) -> bool:
        """Whether the group holds per-message records of only one side of its call: the
        prompt without an answer or an answer without its prompt. SDKs export log batches
        on a timer, so a call's prompt records (written before the call) and its choice
        (after it) can arrive in two messages; scored apart, the halves would be two
        results under one result id, each judging half a conversation."""
        names = {name for name, _, _ in self._records}
        if _DETAILS in names:
            return False
        has_answer = not names.isdisjoint(_ANSWERS)
        has_prompt = not names <= _ANSWERS
        return has_answer != has_prompt

    def events(self) -> list[tuple[str, AttrGetter]]:
        return [(name, self._getter(attrs, body)) for name, attrs, body in self._records]

    def _getter(self, attrs: dict[str, Any], body: Any) -> AttrGetter:
        """A record's values by key: its body's map entries first (where the 1.28-1.36
        events put ``content``, ``message``, ``finish_reason``), then its attributes."""
        convert = self.convert
        converted: list[Any] = []  # the body, converted on first use

        def get(key: str) -> Any:
            if body is not None:
                if not converted:
                    converted.append(convert(body))
                value = converted[0]
                if isinstance(value, dict) and key in value:
                    return value[key]
            raw = attrs.get(key)
            return None if raw is None else convert(raw)

        return get


class Records:
    """Groups one message's GenAI records by call, then hands the groups to a builder."""

    __slots__ = ("_builder", "_convert", "_groups", "records")

    def __init__(self, builder: BatchBuilder, convert: Callable[[Any], Any]) -> None:
        self._builder = builder
        self._convert = convert
        #: (trace id, span id) -> (group, its first record's resource).
        self._groups: dict[tuple[str, str], tuple[_LogGroup, Resource]] = {}
        self.records = 0

    def room(self) -> int:
        """How many more records may be looked at (:data:`~.genai.MAX_SPANS_PER_MESSAGE`)."""
        return max(0, MAX_SPANS_PER_MESSAGE - self.records)

    def skip(self, reason: str, count: int = 1) -> None:
        """Count ``count`` records not made into events, as ``reason``."""
        self.records += count
        # Seen, so the message is not counted as an empty batch.
        self._builder.skip(reason, count)

    def add(self, trace_id: str, span_id: str, name: str, attrs: dict[str, Any], body: Any,
            ns: int, resource: Resource) -> None:
        """Add one GenAI record with valid ids (lowercase hex) to its call's group."""
        self.records += 1
        key = (trace_id, span_id)
        found = self._groups.get(key)
        if found is None:
            found = self._groups[key] = (_LogGroup(trace_id, span_id, self._convert), resource)
        found[0].add(name, attrs, body, ns)

    def finish(self) -> None:
        """Hand every group to the builder (which counts what it skips); a group holding
        one side of its call only (:meth:`_LogGroup.partial`) counts as ``partial_call``,
        unless a record says the call failed (``error_span``, as the builder counts it)."""
        builder = self._builder
        for group, resource in self._groups.values():
            if group.partial() and not group.failed():
                builder.skip("partial_call")
            else:
                builder.add(group, resource)
