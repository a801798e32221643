"""``otlp_json``: OTLP/JSON trace batches (the Collector's ``encoding: otlp_json``).

Parsed with orjson and walked as dicts, not with ``google.protobuf.json_format``: OTLP/JSON
ids are hex strings, which the protobuf JSON parser silently reads as base64 (24-byte ids,
no error). Keys are lowerCamelCase; 64-bit integers arrive as decimal strings (numbers are
accepted too); enums are integers; unknown fields are ignored.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable
from typing import Any

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import load_json
from evalstream.formats.base import Decoded, Decoder
from evalstream.formats.genai import (
    MAX_SPANS_PER_MESSAGE,
    BatchBuilder,
    check_containers,
    record_decoder,
)
from evalstream.formats.genai_messages import AttrGetter, BadSpanError
from evalstream.formats.span_view import Attrs, Options, Resource, SpanView

__all__ = ["any_value", "decode", "hex_id", "make_decoder", "resource_entries"]


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise BadSpanError("boolValue is not a boolean")


def _array(value: Any) -> list[Any]:
    return [any_value(v) for v in value.get("values") or ()]


def _kvlist(value: Any) -> dict[str, Any]:
    return {kv["key"]: any_value(kv.get("value") or {}) for kv in value.get("values") or ()}


def _bytes(value: Any) -> str:
    return base64.b64decode(value).hex()


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "stringValue": str,
    "intValue": int,  # decimal string per the spec; int() accepts numbers as well
    "doubleValue": float,  # also "NaN" / "Infinity" strings
    "boolValue": _bool,
    "arrayValue": _array,
    "kvlistValue": _kvlist,
    "bytesValue": _bytes,
}


def any_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` object as plain Python (``None`` when empty)."""
    text = value.get("stringValue")
    if text is not None:
        return text
    for key, inner in value.items():
        convert = _CONVERTERS.get(key)
        # null is "not set" in protobuf's JSON mapping (str(None) made it the text "None").
        if convert is not None and inner is not None:
            return convert(inner)
    return None


def _attrs(key_values: Any) -> Attrs:
    if not key_values:
        return Attrs({}, any_value)
    return Attrs({kv["key"]: kv.get("value") for kv in key_values}, any_value)


_HEX = re.compile("[0-9a-fA-F]*")


def hex_id(value: Any, length: int, what: str) -> str:
    """An OTLP/JSON id (``length`` hex characters) in lowercase; raises ``BadSpanError``."""
    if not isinstance(value, str) or len(value) != length:
        raise BadSpanError(f"{what} must be {length} hex characters")
    # Not bytes.fromhex: it skips whitespace, so "0123 4567..." would pass as an id.
    if not _HEX.fullmatch(value):
        raise BadSpanError(f"{what} is not hex")
    return value.lower()


class _JsonSpan(SpanView):
    __slots__ = ("span",)

    def __init__(self, span: dict[str, Any]) -> None:
        attributes = span.get("attributes")
        self.raw = {kv["key"]: kv.get("value") for kv in attributes} if attributes else {}
        self.convert = any_value
        self.span = span

    def ids(self) -> tuple[str, str]:
        span = self.span
        trace_id = hex_id(span.get("traceId"), 32, "traceId")
        span_id = hex_id(span.get("spanId"), 16, "spanId")
        if not trace_id.strip("0") or not span_id.strip("0"):
            # Invalid in OTLP; as ids, every such span got one event id (and result ids).
            raise BadSpanError("an all-zero traceId or spanId is invalid")
        return trace_id, span_id

    def times(self) -> tuple[int, int]:
        span = self.span
        return int(span.get("startTimeUnixNano") or 0), int(span.get("endTimeUnixNano") or 0)

    def name(self) -> str:
        name = self.span.get("name")
        return name if isinstance(name, str) else ""

    def failed(self) -> bool:
        status = self.span.get("status")
        if not status:
            return False
        code: object = status.get("code")
        # An integer per the OTLP/JSON spec; some exporters write the enum name.
        return code == 2 or code == "STATUS_CODE_ERROR"

    def parent_id(self) -> str:
        parent = self.span.get("parentSpanId")
        return parent.lower() if isinstance(parent, str) else ""

    def has_events(self) -> bool:
        return bool(self.span.get("events"))

    def events(self) -> list[tuple[str, AttrGetter]]:
        return [(str(event.get("name") or ""), _attrs(event.get("attributes")).get)
                for event in self.span.get("events") or ()]


#: What walking a malformed (but valid JSON) structure raises.
_MALFORMED = (BadSpanError, ValueError, TypeError, KeyError, AttributeError, ArithmeticError,
              RecursionError)


def _count_spans(resource_spans: Any) -> int:
    """How many spans a malformed container holds, as far as can be told (at least 1)."""
    try:
        return max(1, sum(len(ss.get("spans") or ()) for ss in resource_spans["scopeSpans"]))
    except (TypeError, KeyError, AttributeError):
        return 1


def resource_entries(value: bytes | str, signal: str, what: str = "") -> list[Any]:
    """The ``resource<Signal>`` list of an OTLP/JSON document, its walk bounded.

    Shared by the traces and the logs decoders: ``signal`` is ``"Spans"`` or ``"Logs"``
    (``resourceSpans`` holding ``scopeSpans``), ``what`` a word for messages (``" logs"``).

    Raises:
        DecodeError: ``invalid_json`` when the bytes are not JSON, ``not_otlp`` when the
            JSON is no such batch (an object without the list, or with another value
            there), ``too_many_containers`` past :data:`~.genai.MAX_CONTAINERS_PER_MESSAGE`.
    """
    key, scopes_key = f"resource{signal}", f"scope{signal}"
    try:
        doc = load_json(value)
    except ValueError as exc:
        raise DecodeError("invalid_json", f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DecodeError("not_otlp", f"OTLP/JSON{what} must be an object with {key}")
    entries = doc.get(key)
    if entries is None and doc:
        raise DecodeError("not_otlp", f"JSON object without {key}")
    if entries is not None and not isinstance(entries, list):
        raise DecodeError("not_otlp", f"{key} is not a list")
    if not entries:
        return []

    def scope_count(entry: Any) -> int:
        # 0 when malformed: the walk counts those entries as bad.
        scopes = entry.get(scopes_key) if isinstance(entry, dict) else None
        return len(scopes) if isinstance(scopes, list) else 0

    check_containers(len(entries), map(scope_count, entries))
    return entries


def decode(value: bytes | str, options: Options,
           record_timestamp_ms: int | None = None) -> Decoded:
    """Decode one OTLP/JSON ``TracesData`` / ``ExportTraceServiceRequest``.

    Raises:
        DecodeError: ``invalid_json`` when the bytes are not JSON, ``not_otlp`` when the
            JSON is not a trace batch (no ``resourceSpans`` list), ``too_many_containers``
            past :data:`~.genai.MAX_CONTAINERS_PER_MESSAGE`.
    """
    resource_spans = resource_entries(value, "Spans")
    builder = BatchBuilder(options, record_timestamp_ms)
    add = builder.add
    for rs in resource_spans:
        try:
            scope_spans = [ss.get("spans") or () for ss in rs.get("scopeSpans") or ()]
            spans = [span for group in scope_spans for span in group]
        except _MALFORMED:
            # Its scopes are malformed: its spans cannot be attributed.
            builder.add_bad(_count_spans(rs))
            continue
        if len(spans) > MAX_SPANS_PER_MESSAGE - builder.spans:
            room = builder.room()
            builder.add_excess(len(spans) - room)  # counted, not looked at
            del spans[room:]
        if not spans:
            continue  # nothing left to attribute to it: its resource is not worth building
        try:
            resource = Resource(_attrs((rs.get("resource") or {}).get("attributes")), options)
        except _MALFORMED:
            builder.add_bad(len(spans))  # a malformed resource: its spans cannot be attributed
            continue
        for span in spans:
            try:
                view = _JsonSpan(span)
            except _MALFORMED:
                builder.add_bad()
                continue
            add(view, resource)
    return builder.finish()


def make_decoder(topic: InputTopic, carry: Iterable[str] = ()) -> Decoder:
    """A decoder for ``topic`` (``format: otlp_json``), carrying the attributes ``carry`` names
    (see :func:`~.genai.record_decoder`)."""
    return record_decoder(topic, decode, carry)
