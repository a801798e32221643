"""``otlp_proto``: the OpenTelemetry Collector Kafka exporter's default encoding.

A message is one serialised ``TracesData`` (older pdata) or ``ExportTraceServiceRequest``
(newer); both are field 1 = ``repeated ResourceSpans`` on the wire, so one parser reads
both. Parsing is done by protobuf's C (upb) backend; the Python side then only touches the
attributes it needs (see :mod:`.genai`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.trace.v1.trace_pb2 import Status, TracesData

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.formats.base import Decoded, Decoder
from evalstream.formats.genai import BatchBuilder, check_containers, record_decoder
from evalstream.formats.genai_messages import AttrGetter, BadSpanError
from evalstream.formats.span_view import Attrs, Options, Resource, SpanView

__all__ = ["any_value", "decode", "make_decoder"]

_STATUS_ERROR = Status.STATUS_CODE_ERROR
_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)


def any_value(value: Any) -> Any:
    """An ``AnyValue`` message as plain Python (``None`` when no field is set)."""
    # Most values are non-empty strings; reading the field directly is ~3x cheaper than
    # WhichOneof (an unset or other-typed value reads as "" and falls through).
    text = value.string_value
    if text:
        return text
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return text
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value.hex()
    # Unset, or string_value_strindex (a dictionary index only meaningful in profiles).
    return None


def _attrs(key_values: Any) -> Attrs:
    return Attrs({kv.key: kv.value for kv in key_values}, any_value)


class _ProtoSpan(SpanView):
    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.raw = {kv.key: kv.value for kv in span.attributes}
        self.convert = any_value
        self.span = span

    def ids(self) -> tuple[str, str]:
        trace_id = self.span.trace_id
        span_id = self.span.span_id
        if len(trace_id) != 16 or len(span_id) != 8:
            raise BadSpanError("trace_id must be 16 bytes and span_id 8 bytes")
        if trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
            # Invalid in OTLP; as ids, every such span got one event id (and result ids).
            raise BadSpanError("an all-zero trace_id or span_id is invalid")
        return trace_id.hex(), span_id.hex()

    def times(self) -> tuple[int, int]:
        span = self.span
        return span.start_time_unix_nano, span.end_time_unix_nano

    def name(self) -> str:
        name: str = self.span.name
        return name

    def failed(self) -> bool:
        return bool(self.span.status.code == _STATUS_ERROR)

    def parent_id(self) -> str:
        parent: bytes = self.span.parent_span_id
        return parent.hex()

    def has_events(self) -> bool:
        return len(self.span.events) > 0

    def events(self) -> list[tuple[str, AttrGetter]]:
        return [(event.name, _attrs(event.attributes).get) for event in self.span.events]


def decode(value: bytes, options: Options, record_timestamp_ms: int | None = None) -> Decoded:
    """Decode one serialised ``TracesData`` / ``ExportTraceServiceRequest``.

    Raises:
        DecodeError: ``invalid_protobuf`` when the bytes do not parse, ``not_otlp`` when they
            parse but hold no spans container (e.g. text or another message type),
            ``too_many_containers`` past :data:`~.genai.MAX_CONTAINERS_PER_MESSAGE`.
    """
    try:
        data = TracesData.FromString(value)
    except ProtoDecodeError as exc:
        raise DecodeError("invalid_protobuf", f"not an OTLP protobuf trace batch: {exc}") from exc
    resource_spans = data.resource_spans
    if not resource_spans and value:
        # Many byte strings parse as protobuf made only of unknown fields.
        raise DecodeError("not_otlp", "protobuf message without resourceSpans")
    # Parsing is C and cheap (~0.01 s/MB); walking is Python (~1.6 us per container), so the
    # walk is what must be bounded, before any span is built.
    check_containers(len(resource_spans), (len(rs.scope_spans) for rs in resource_spans))
    builder = BatchBuilder(options, record_timestamp_ms)
    add = builder.add
    for rs in resource_spans:
        resource: Resource | None = None  # built for resources that have spans to look at
        for ss in rs.scope_spans:
            spans = ss.spans
            room = builder.room()
            if len(spans) > room:
                # Past the cap nothing is built: the (cheap, C-side) count is all they cost.
                builder.add_excess(len(spans) - room)
                spans = spans[:room]
            if not spans:
                continue
            if resource is None:
                resource = Resource(_attrs(rs.resource.attributes), options)
            for span in spans:
                add(_ProtoSpan(span), resource)
    return builder.finish()


def make_decoder(topic: InputTopic, carry: Iterable[str] = ()) -> Decoder:
    """A decoder for ``topic`` (``format: otlp_proto``), carrying the attributes ``carry`` names
    (see :func:`~.genai.record_decoder`)."""
    return record_decoder(topic, decode, carry)
