"""``otlp_logs_proto``: serialised OTLP log batches (the Collector Kafka exporter's
``logs_topic`` with its default ``encoding: otlp_proto``), for GenAI content sent as events
(see :mod:`.otlp_logs`).

One ``ExportLogsServiceRequest`` (or ``LogsData``: the same wire shape), parsed by
protobuf's C backend; Python only touches the records' event names until one is GenAI.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.formats.base import Decoded, Decoder
from evalstream.formats.genai import BatchBuilder, check_containers, record_decoder
from evalstream.formats.otlp_logs import GENAI_EVENTS, Records
from evalstream.formats.otlp_proto import any_value
from evalstream.formats.span_view import Attrs, Options, Resource

__all__ = ["decode", "make_decoder"]

#: What reading a malformed record can raise (values are typed by the parser: little can).
_MALFORMED = (ValueError, TypeError, AttributeError, RecursionError)


def _event_name(record: Any) -> str | None:
    """``event_name``, else the ``event.name`` attribute (SDKs before the field existed)."""
    name: str = record.event_name
    if name:
        return name
    for kv in record.attributes:
        if kv.key == "event.name":
            value = any_value(kv.value)
            return value if isinstance(value, str) else None
    return None


def _add_record(records: Records, record: Any, resource: Resource) -> None:
    name = _event_name(record)
    if name not in GENAI_EVENTS:
        records.skip("not_genai")
        return
    span_id: bytes = record.span_id
    # Absent, or all zeroes: OTLP's "not associated with a span" (see otlp_logs_json).
    if not any(span_id):
        records.skip("no_span_id")
        return
    trace_id: bytes = record.trace_id
    if len(trace_id) != 16 or len(span_id) != 8:
        records.skip("bad_span")
        return
    ns: int = record.time_unix_nano or record.observed_time_unix_nano
    attrs = {kv.key: kv.value for kv in record.attributes}
    body = record.body if record.HasField("body") else None
    records.add(trace_id.hex(), span_id.hex(), name, attrs, body, ns, resource)


def decode(value: bytes, options: Options, record_timestamp_ms: int | None = None) -> Decoded:
    """Decode one serialised ``ExportLogsServiceRequest`` / ``LogsData``.

    Raises:
        DecodeError: ``invalid_protobuf`` when the bytes do not parse, ``not_otlp`` when they
            parse but hold no logs container, ``too_many_containers`` past
            :data:`~.genai.MAX_CONTAINERS_PER_MESSAGE`.
    """
    try:
        data = ExportLogsServiceRequest.FromString(value)
    except ProtoDecodeError as exc:
        raise DecodeError("invalid_protobuf", f"not an OTLP protobuf log batch: {exc}") from exc
    resource_logs = data.resource_logs
    if not resource_logs and value:
        # Many byte strings parse as protobuf made only of unknown fields.
        raise DecodeError("not_otlp", "protobuf message without resourceLogs")
    check_containers(len(resource_logs), (len(rl.scope_logs) for rl in resource_logs))
    builder = BatchBuilder(options, record_timestamp_ms)
    records = Records(builder, any_value)
    for rl in resource_logs:
        resource: Resource | None = None  # built for resources that have records
        for sl in rl.scope_logs:
            found = sl.log_records
            room = records.room()
            if len(found) > room:
                records.skip("too_many_spans", len(found) - room)
                found = found[:room]
            if not found:
                continue
            if resource is None:
                resource = Resource(
                    Attrs({kv.key: kv.value for kv in rl.resource.attributes}, any_value),
                    options)
            for record in found:
                try:
                    _add_record(records, record, resource)
                except _MALFORMED:
                    records.skip("bad_span")
    records.finish()
    return builder.finish()


def make_decoder(topic: InputTopic, carry: Iterable[str] = ()) -> Decoder:
    """A decoder for ``topic`` (``format: otlp_logs_proto``), carrying the attributes
    ``carry`` names (see :func:`~.genai.record_decoder`)."""
    return record_decoder(topic, decode, carry)
