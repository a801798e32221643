"""Results as OpenTelemetry events: one OTLP log record ``gen_ai.evaluation.result`` each.

``topics.otel_results`` publishes every result a second time in this shape, so that an
OpenTelemetry Collector's Kafka receiver (logs, ``encoding: otlp_proto`` or ``otlp_json``)
can read the topic directly and send scores on to any OTel backend, and guardrails or
annotation queues can subscribe without evalstream's own JSON.

Each message is an ``ExportLogsServiceRequest`` (the Collector's ``LogsData``) holding one
resource (``service.name``), one scope (``evalstream`` and its version) and one log record:

* ``event_name`` ``gen_ai.evaluation.result``, parented to the evaluated span (the
  record's ``trace_id``/``span_id``; left unset when the event had none, or ids that are
  not 32/16 hex characters, as a flat_json event may carry);
* ``time_unix_nano`` = ``evaluated_at``;
* the semantic-convention attributes ``gen_ai.evaluation.name`` (the evaluator's label),
  ``gen_ai.evaluation.score.value``, ``gen_ai.evaluation.score.label``,
  ``gen_ai.evaluation.explanation`` (the reason), ``gen_ai.response.id`` (when the result
  carries the event's ``response_id`` attribute: list it under ``results.attributes``) and
  ``error.type`` (error results: a short fixed class, never the error's text, which may
  quote the trace);
* ``evalstream.*`` attributes to join and filter on: ``result_id`` (the key of the result
  on the results topic), ``route``, ``evaluator_version``, ``passed``, ``threshold``,
  ``sample_rate``, ``canary``, ``status``, ``judge.backend``, ``judge.model``,
  ``judge.probabilities_from`` (when an LLM answered: ``logprobs``, ``json``, ``mixed``).

Never any trace content (input, output, messages, context) nor ``details``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Literal

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from evalstream.events import EvalResult, dump_json

__all__ = ["EVENT_NAME", "OtelEncoding", "error_type", "otel_result"]

#: The OpenTelemetry event a result becomes.
EVENT_NAME = "gen_ai.evaluation.result"
#: The Collector Kafka receiver's logs encodings this module writes.
OtelEncoding = Literal["otlp_proto", "otlp_json"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
#: Prefixes of the error texts the worker writes (``app/pipeline.py``,
#: ``app/publish_result.py``) -> ``error.type``; ``<ExceptionName>: ...`` gives the name.
_ERROR_TYPES = {"judge": "judge", "invalid score fields": "invalid_score",
                "result rejected": "result_rejected", "internal error": "internal_error"}
#: The semantic conventions' ``error.type`` when no class applies.
_OTHER = "_OTHER"
#: Message templates kept (:func:`_template`): one per route, evaluator and outcome
#: (passed, failed, error class...), so a few per evaluator; more only evicts.
_TEMPLATES = 512


def _ids(hex_id: str, length: int) -> bytes:
    """The bytes of ``hex_id`` when it is ``length`` hex characters and not all zeros (OTLP's
    "no id"), else empty (left unset)."""
    if len(hex_id) != length:
        return b""
    try:
        raw = bytes.fromhex(hex_id)
    except ValueError:
        return b""
    # fromhex skips whitespace: "0123 4567..." gives fewer bytes, and is no id.
    return raw if len(raw) * 2 == length and any(raw) else b""


def _unix_ns(at: datetime) -> int:
    # Exact integer arithmetic (a float timestamp loses microseconds); naive means UTC.
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // _MICROSECOND * 1000


def error_type(error: str | None) -> str:
    """A short fixed class for an error result's text: its prefix when the worker wrote a
    known one, the exception's name for ``Name: message``, else ``_OTHER``.

    Never the text itself: a judge's or evaluator's message may quote the trace.
    """
    prefix, colon, _ = (error or "").partition(":")
    if not colon:
        return _OTHER
    if prefix in _ERROR_TYPES:
        return _ERROR_TYPES[prefix]
    # A Python exception's name (``ValueError: ...``, ``pipeline.failed``'s evaluator bugs).
    if prefix.isidentifier() and prefix[:1].isupper() and len(prefix) <= 64:
        return prefix
    return _OTHER


#: An attribute value as written: string, double or bool (OTLP ``AnyValue``).
Value = str | float | bool


def _shared(result: EvalResult) -> tuple[tuple[str, Value], ...]:
    """The attributes that a route's evaluator gives most of its results alike (a few
    combinations each): the part of the message :func:`_template` builds once."""
    out: list[tuple[str, Value]] = [
        ("gen_ai.evaluation.name", result.evaluator), ("evalstream.route", result.route),
        ("evalstream.evaluator_version", result.evaluator_version),
        ("evalstream.status", result.status)]
    if result.status == "error":
        out.append(("error.type", error_type(result.error)))
    if result.passed is not None:
        out.append(("evalstream.passed", result.passed))
    if result.threshold is not None:
        out.append(("evalstream.threshold", result.threshold))
    out += [("evalstream.sample_rate", result.sample_rate),
            ("evalstream.canary", result.canary)]
    if result.judge is not None:
        out.append(("evalstream.judge.backend", result.judge.backend))
        if result.judge.model:
            out.append(("evalstream.judge.model", result.judge.model))
        if result.judge.probabilities_from:
            out.append(("evalstream.judge.probabilities_from", result.judge.probabilities_from))
    return tuple(out)


def _own(result: EvalResult) -> list[tuple[str, Value]]:
    """The attributes that differ from result to result."""
    out: list[tuple[str, Value]] = [("evalstream.result_id", result.result_id)]
    if result.score is not None:
        out.append(("gen_ai.evaluation.score.value", result.score))
    if result.label is not None:
        out.append(("gen_ai.evaluation.score.label", result.label))
    if result.reason:
        out.append(("gen_ai.evaluation.explanation", result.reason))
    if response_id := result.attributes.get("response_id"):
        out.append(("gen_ai.response.id", response_id))
    return out


def _add(record: LogRecord, attributes: Iterable[tuple[str, Value]]) -> None:
    # Field by field on the message in place: ~2x faster under upb than building
    # KeyValue/AnyValue objects with keyword arguments.
    add = record.attributes.add
    for key, value in attributes:
        kv = add()
        kv.key = key
        if isinstance(value, bool):  # before float: a bool is an int
            kv.value.bool_value = value
        elif isinstance(value, str):
            kv.value.string_value = value
        else:
            kv.value.double_value = value


def _fill(record: LogRecord, result: EvalResult, observed_ns: int) -> None:
    """Set everything but the event name and shared attributes on ``record``."""
    record.time_unix_nano = _unix_ns(result.evaluated_at)
    record.observed_time_unix_nano = observed_ns
    trace_id = _ids(result.trace_id, 32)
    if trace_id:
        record.trace_id = trace_id
        # A span id without its trace id parents nothing.
        if span_id := _ids(result.span_id, 16):
            record.span_id = span_id
    _add(record, _own(result))


@functools.lru_cache(maxsize=_TEMPLATES)
def _template(service_name: str, scope_version: str,
              shared: tuple[tuple[str, Value], ...]) -> bytes:
    """The request with its resource, scope and one record holding only its event name and
    ``shared``, as bytes: parsing them back costs one call, where building them costs a call
    per field (about half the encoding time of a result, bench/otel_results.py)."""
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.add(
        key="service.name", value=AnyValue(string_value=service_name))
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name = "evalstream"
    scope_logs.scope.version = scope_version
    _add(scope_logs.log_records.add(event_name=EVENT_NAME), shared)
    value: bytes = request.SerializeToString()
    return value


def _json_value(value: Value) -> dict[str, Value]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    return {"doubleValue": value}


def _json(result: EvalResult, service_name: str, scope_version: str,
          observed_ns: int) -> bytes:
    """OTLP/JSON, written directly: ``json_format.MessageToDict`` is pure Python and cost
    ~40x a result's own JSON (bench/otel_results.py); this is the same message (the unit
    tests parse it back with ``json_format`` and compare with the protobuf encoding)."""
    record: dict[str, object] = {
        "timeUnixNano": str(_unix_ns(result.evaluated_at)),
        "observedTimeUnixNano": str(observed_ns),
        "attributes": [{"key": k, "value": _json_value(v)}
                       for k, v in (*_shared(result), *_own(result))],
        "eventName": EVENT_NAME,
    }
    # OTLP/JSON writes ids as hex (protobuf's JSON mapping would write base64).
    if trace_id := _ids(result.trace_id, 32):
        record["traceId"] = trace_id.hex()
        if span_id := _ids(result.span_id, 16):
            record["spanId"] = span_id.hex()
    return dump_json({"resourceLogs": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": service_name}}]},
        "scopeLogs": [{"scope": {"name": "evalstream", "version": scope_version},
                       "logRecords": [record]}],
    }]})


def otel_result(result: EvalResult, *, service_name: str, scope_version: str,
                encoding: OtelEncoding = "otlp_proto", observed_ns: int) -> bytes:
    """One Kafka message for ``result``: an ``ExportLogsServiceRequest`` of one record.

    Args:
        result: A published result.
        service_name: The resource's ``service.name``.
        scope_version: The instrumentation scope's version (evalstream's).
        encoding: ``otlp_proto`` (binary protobuf, the Collector's default) or
            ``otlp_json`` (OTLP/JSON: hex ids, lowerCamelCase keys, 64-bit integers as
            strings).
        observed_ns: When it is written (ns since the epoch).

    Returns:
        The message value.
    """
    if encoding == "otlp_json":
        return _json(result, service_name, scope_version, observed_ns)
    request = ExportLogsServiceRequest.FromString(
        _template(service_name, scope_version, _shared(result)))
    _fill(request.resource_logs[0].scope_logs[0].log_records[0], result, observed_ns)
    value: bytes = request.SerializeToString()
    return value
