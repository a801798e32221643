"""``otlp_logs_json``: OTLP/JSON log batches (the Collector Kafka exporter's ``logs_topic``
with ``encoding: otlp_json``), for GenAI content sent as events (see :mod:`.otlp_logs`).

Walked as dicts like :mod:`.otlp_json` (hex ids, lowerCamelCase keys, 64-bit integers as
decimal strings, integer enums), with its ``AnyValue`` converter.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evalstream.config import InputTopic
from evalstream.formats.base import Decoded, Decoder
from evalstream.formats.genai import BatchBuilder, record_decoder
from evalstream.formats.genai_messages import BadSpanError
from evalstream.formats.otlp_json import any_value, hex_id, resource_entries
from evalstream.formats.otlp_logs import GENAI_EVENTS, Records
from evalstream.formats.span_view import Attrs, Options, Resource

__all__ = ["decode", "make_decoder"]

#: What walking a malformed (but valid JSON) structure raises.
_MALFORMED = (BadSpanError, ValueError, TypeError, KeyError, AttributeError, ArithmeticError,
              RecursionError)


def _event_name(record: dict[str, Any]) -> str | None:
    """The record's event name: ``eventName``, else the ``event.name`` attribute (SDKs
    before the field existed). Scans the attributes without building anything: most
    records of a logs topic are application logs, skipped after this."""
    name = record.get("eventName")
    if name:
        return name if isinstance(name, str) else None
    for kv in record.get("attributes") or ():
        if kv.get("key") == "event.name":
            value = any_value(kv.get("value") or {})
            return value if isinstance(value, str) else None
    return None


def _add_record(records: Records, record: Any, resource: Resource) -> None:
    name = _event_name(record)
    if name not in GENAI_EVENTS:
        records.skip("not_genai")
        return
    span_id = record.get("spanId")
    # Absent, or all zeroes: OTLP's "not associated with a span" (older Python SDKs sent
    # zero ids for records outside a span); grouped, unrelated calls would merge.
    if not span_id or (isinstance(span_id, str) and not span_id.strip("0")):
        records.skip("no_span_id")
        return
    trace_id = hex_id(record.get("traceId"), 32, "traceId")
    span_id = hex_id(span_id, 16, "spanId")
    ns = int(record.get("timeUnixNano") or 0) or int(record.get("observedTimeUnixNano") or 0)
    attributes = record.get("attributes")
    attrs = {kv["key"]: kv.get("value") for kv in attributes} if attributes else {}
    records.add(trace_id, span_id, name, attrs, record.get("body"), ns, resource)


def decode(value: bytes | str, options: Options,
           record_timestamp_ms: int | None = None) -> Decoded:
    """Decode one OTLP/JSON ``LogsData`` / ``ExportLogsServiceRequest``.

    Raises:
        DecodeError: ``invalid_json`` when the bytes are not JSON, ``not_otlp`` when the
            JSON is not a log batch (no ``resourceLogs`` list: a trace batch is not one),
            ``too_many_containers`` past :data:`~.genai.MAX_CONTAINERS_PER_MESSAGE`.
    """
    resource_logs = resource_entries(value, "Logs", " logs")
    builder = BatchBuilder(options, record_timestamp_ms)
    records = Records(builder, any_value)
    for rl in resource_logs:
        try:
            found = [r for sl in rl.get("scopeLogs") or () for r in sl.get("logRecords") or ()]
        except _MALFORMED:
            records.skip("bad_span")  # its scopes are malformed: nothing can be attributed
            continue
        room = records.room()
        if len(found) > room:
            records.skip("too_many_spans", len(found) - room)  # counted, not looked at
            del found[room:]
        if not found:
            continue
        try:
            resource = Resource(Attrs(
                {kv["key"]: kv.get("value") for kv in
                 (rl.get("resource") or {}).get("attributes") or ()}, any_value), options)
        except _MALFORMED:
            records.skip("bad_span", len(found))
            continue
        for record in found:
            try:
                _add_record(records, record, resource)
            except _MALFORMED:
                records.skip("bad_span")
    records.finish()
    return builder.finish()


def make_decoder(topic: InputTopic, carry: Iterable[str] = ()) -> Decoder:
    """A decoder for ``topic`` (``format: otlp_logs_json``), carrying the attributes ``carry``
    names (see :func:`~.genai.record_decoder`)."""
    return record_decoder(topic, decode, carry)
