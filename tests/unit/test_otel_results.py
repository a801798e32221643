"""The OpenTelemetry copy of results (``topics.otel_results``): each result as one OTLP log
record, the event ``gen_ai.evaluation.result``, in both Collector encodings; and its config."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from aiokafka.errors import (
    MessageSizeTooLargeError,
    PolicyViolationError,
    TopicAuthorizationFailedError,
)
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from evalstream.app.outputs import Outputs
from evalstream.config import KafkaSettings, TopicSettings, load_settings
from evalstream.errors import ConfigError, OutputRejectedError, SinkError
from evalstream.events import EvalResult, JudgeInfo, load_json
from evalstream.metrics import Metrics
from evalstream.sinks.kafka import KafkaSink
from evalstream.sinks.memory import MemorySink
from evalstream.sinks.otel_results import OtelEncoding, error_type, otel_result

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
AT = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
OBSERVED = 1_796_040_000_987_654_321


def _result(**fields: Any) -> EvalResult:
    base: dict[str, Any] = {
        "result_id": "r" * 32, "event_id": f"{TRACE}-{SPAN}", "trace_id": TRACE,
        "span_id": SPAN, "route": "support", "evaluator": "refusal-strict",
        "evaluator_version": "2+1", "score": 0.25, "label": "refusal", "passed": False,
        "threshold": 0.5, "reason": "declined the request", "sample_rate": 0.1,
        "attributes": {"response_id": "chatcmpl-42", "model": "gpt-4o-mini"},
        "judge": JudgeInfo(backend="openai", model="gpt-4o-mini", probabilities_from="json"),
        "evaluated_at": AT} | fields
    return EvalResult.model_validate(base)


def _proto(result: EvalResult) -> ExportLogsServiceRequest:
    value = otel_result(result, service_name="evalstream-prod", scope_version="1.2.3",
                        observed_ns=OBSERVED)
    return ExportLogsServiceRequest.FromString(value)


def _record(request: ExportLogsServiceRequest) -> LogRecord:
    (resource_logs,) = request.resource_logs
    (scope_logs,) = resource_logs.scope_logs
    (record,) = scope_logs.log_records
    return record


def _attributes(record: LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in record.attributes:
        kind = kv.value.WhichOneof("value")
        assert kind is not None
        assert kv.key not in out, f"{kv.key} twice"
        out[kv.key] = getattr(kv.value, kind)
    return out


def test_a_result_is_one_gen_ai_evaluation_result_event_parented_to_its_span() -> None:
    request = _proto(_result())
    (resource_logs,) = request.resource_logs
    assert [(a.key, a.value.string_value) for a in resource_logs.resource.attributes] == [
        ("service.name", "evalstream-prod")]
    (scope_logs,) = resource_logs.scope_logs
    assert (scope_logs.scope.name, scope_logs.scope.version) == ("evalstream", "1.2.3")
    record = _record(request)
    assert record.event_name == "gen_ai.evaluation.result"
    assert record.trace_id.hex() == TRACE
    assert record.span_id.hex() == SPAN
    assert record.time_unix_nano == 1_796_040_000_123_456_000  # exact, to the microsecond
    assert record.observed_time_unix_nano == OBSERVED
    assert not record.HasField("body")
    assert _attributes(record) == {
        "gen_ai.evaluation.name": "refusal-strict",
        "gen_ai.evaluation.score.value": 0.25,
        "gen_ai.evaluation.score.label": "refusal",
        "gen_ai.evaluation.explanation": "declined the request",
        "gen_ai.response.id": "chatcmpl-42",
        "evalstream.result_id": "r" * 32,
        "evalstream.route": "support",
        "evalstream.evaluator_version": "2+1",
        "evalstream.status": "ok",
        "evalstream.passed": False,
        "evalstream.threshold": 0.5,
        "evalstream.sample_rate": 0.1,
        "evalstream.canary": False,
        "evalstream.judge.backend": "openai",
        "evalstream.judge.model": "gpt-4o-mini",
        "evalstream.judge.probabilities_from": "json",
    }


def test_no_trace_content_and_no_unset_fields() -> None:
    result = _result(score=None, label=None, passed=None, threshold=None, reason=None,
                     attributes={"model": "m"}, judge=None,
                     details={"quote": "the user's secret question"})
    attributes = _attributes(_record(_proto(result)))
    assert set(attributes) == {
        "gen_ai.evaluation.name", "evalstream.result_id", "evalstream.route",
        "evalstream.evaluator_version", "evalstream.status", "evalstream.sample_rate",
        "evalstream.canary"}
    assert b"secret" not in otel_result(result, service_name="s", scope_version="v",
                                        observed_ns=1)


@pytest.mark.parametrize(("trace_id", "span_id", "want_trace", "want_span"), [
    ("", "", b"", b""),  # a flat_json event without ids
    ("req-123", "abc", b"", b""),  # an app's own ids, not OTel's
    (TRACE, "", bytes.fromhex(TRACE), b""),
    (TRACE, "xyz", bytes.fromhex(TRACE), b""),
    ("0" * 32, SPAN, b"", b""),  # all zeros is OTLP's "no trace": no span parents it
    (TRACE[:14] + "  " + TRACE[16:], SPAN, b"", b""),  # right length, but not all hex
    (TRACE, SPAN[:7] + "g" + SPAN[8:], bytes.fromhex(TRACE), b""),
    (TRACE.upper(), SPAN.upper(), bytes.fromhex(TRACE), bytes.fromhex(SPAN)),
])
def test_ids_are_set_only_when_they_are_otel_ids(trace_id: str, span_id: str,
                                                 want_trace: bytes, want_span: bytes) -> None:
    result = _result(trace_id=trace_id, span_id=span_id)
    record = _record(_proto(result))
    assert (record.trace_id, record.span_id) == (want_trace, want_span)
    data = load_json(otel_result(result, service_name="s", scope_version="v",
                                 encoding="otlp_json", observed_ns=1))
    log = data["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert log.get("traceId", "") == want_trace.hex()
    assert log.get("spanId", "") == want_span.hex()


def test_an_error_result_carries_a_fixed_error_type_never_its_text() -> None:
    result = _result(score=None, label=None, passed=None, threshold=None, reason=None,
                     status="error", error="judge: 400 from the API: 'my card 4111 ...'")
    attributes = _attributes(_record(_proto(result)))
    assert attributes["error.type"] == "judge"
    assert attributes["evalstream.status"] == "error"
    assert "4111" not in repr(attributes)


@pytest.mark.parametrize(("error", "kind"), [
    ("judge: timed out", "judge"),
    ("invalid score fields: score", "invalid_score"),
    ("result rejected: evalstream.results refused a record", "result_rejected"),
    ("internal error: KeyError", "internal_error"),
    ("ValueError: the user's text", "ValueError"),
    ("the user's text: more", "_OTHER"),
    ("no colon at all", "_OTHER"),
    # No colon, no class: a one-word error may be the trace's own word.
    ("Paris", "_OTHER"),
    ("judge", "_OTHER"),
    # An exception's name up to 64 characters; longer is not one.
    ("E" * 64 + ": text", "E" * 64),
    ("E" * 65 + ": text", "_OTHER"),
    (None, "_OTHER"),
])
def test_error_type(error: str | None, kind: str) -> None:
    assert error_type(error) == kind


@pytest.mark.parametrize("evaluated_at", [
    AT.astimezone(timezone(timedelta(hours=2))),  # the same instant, written at +02:00
    AT.replace(tzinfo=None),  # naive: taken as UTC
])
@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_the_event_time_is_the_instant_evaluated_whatever_its_zone(
        evaluated_at: datetime, encoding: OtelEncoding) -> None:
    value = otel_result(_result(evaluated_at=evaluated_at), service_name="s",
                        scope_version="1", encoding=encoding, observed_ns=OBSERVED)
    if encoding == "otlp_json":
        request = json_format.Parse(value, ExportLogsServiceRequest())
    else:
        request = ExportLogsServiceRequest.FromString(value)
    assert _record(request).time_unix_nano == 1_796_040_000_123_456_000


def test_a_canary_says_so() -> None:
    attributes = _attributes(_record(_proto(_result(canary=True, gold="true", sample_rate=1.0))))
    assert attributes["evalstream.canary"] is True
    assert attributes["evalstream.sample_rate"] == 1.0


def _from_otlp_json(value: bytes) -> ExportLogsServiceRequest:
    """Parse OTLP/JSON with protobuf's parser: its ids are hex, protobuf JSON's base64."""
    data = load_json(value)
    for resource in data["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for log in scope["logRecords"]:
                for name in ("traceId", "spanId"):
                    if name in log:
                        log[name] = base64.b64encode(bytes.fromhex(log[name])).decode()
    return json_format.ParseDict(data, ExportLogsServiceRequest())


@pytest.mark.parametrize("result", [
    _result(), _result(trace_id="", span_id=""),
    _result(score=None, status="error", error="internal error: KeyError", judge=None),
    _result(canary=True, sample_rate=1.0, score=1.0, label=None, reason="")],
    ids=["full", "no ids", "error", "canary"])
def test_otlp_json_is_the_same_message_as_otlp_proto(result: EvalResult) -> None:
    proto = otel_result(result, service_name="svc", scope_version="9", observed_ns=OBSERVED)
    text = otel_result(result, service_name="svc", scope_version="9", encoding="otlp_json",
                       observed_ns=OBSERVED)
    assert _from_otlp_json(text) == ExportLogsServiceRequest.FromString(proto)
    # The OTLP/JSON rules: hex ids, lowerCamelCase keys, 64-bit integers as strings.
    log = load_json(text)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert log["eventName"] == "gen_ai.evaluation.result"
    assert log["observedTimeUnixNano"] == str(OBSERVED)
    if result.trace_id:
        assert log["traceId"] == TRACE


def test_json_format_parse_reads_the_json_too() -> None:
    # json_format.Parse on the raw text: accepted (hex is valid base64 text), so only the
    # hex -> bytes conversion above differs from a plain protobuf JSON reader.
    text = otel_result(_result(), service_name="svc", scope_version="9", encoding="otlp_json",
                       observed_ns=OBSERVED)
    parsed = json_format.Parse(text, ExportLogsServiceRequest())
    assert _record(parsed).event_name == "gen_ai.evaluation.result"


async def test_the_memory_sink_keeps_the_otel_copy_of_each_result() -> None:
    sink = MemorySink(otel_encoding="otlp_proto")
    ok, failed = _result(), _result(status="error", error="judge: down", score=None)
    await sink.publish_result(ok)
    await sink.publish_result(failed)
    assert [_attributes(_record(ExportLogsServiceRequest.FromString(v)))["evalstream.status"]
            for v in sink.otel_results] == ["ok", "error"]
    plain = MemorySink()
    await plain.publish_result(ok)
    assert plain.otel_results == []


# -- config ---------------------------------------------------------------------------------

def test_off_by_default_and_set_by_topic() -> None:
    assert load_settings(None).topics.otel_results == ""
    topics = load_settings(None, topics={"otel_results": "evalstream.otel",
                                         "otel_encoding": "otlp_json"}).topics
    assert (topics.otel_results, topics.otel_encoding) == ("evalstream.otel", "otlp_json")


@pytest.mark.parametrize(("topics", "inputs", "says"), [
    ({"otel_results": "evalstream.results"}, None,
     "otel_results: 'evalstream.results' is also topics.results"),
    ({"otel_results": "evalstream.dlq"}, None, "is also topics.dead_letter"),
    ({"otel_results": "evalstream.alerts"}, None, "is also topics.alerts"),
    ({"otel_results": "llm.traces"}, [{"topic": "llm.traces"}],
     "topics.otel_results: 'llm.traces' is also an input topic"),
    ({"otel_results": "otel results"}, None, "topics.otel_results: Value error, not a valid"),
    ({"otel_encoding": "otlp_json"}, None, "otel_encoding: set, but otel_results is empty"),
    ({"otel_results": "x", "otel_encoding": "json"}, None, "topics.otel_encoding"),
])
def test_config_errors_name_the_field(topics: dict[str, str],
                                      inputs: list[dict[str, str]] | None, says: str) -> None:
    extra: dict[str, Any] = {"topics": topics}
    if inputs is not None:
        extra["inputs"] = inputs
    with pytest.raises(ConfigError) as info:
        load_settings(None, **extra)
    assert says in str(info.value)


def test_the_labels_topic_is_not_the_otel_topic() -> None:
    with pytest.raises(ConfigError, match=r"labels.topic: 'x.otel' is also topics.otel_results"):
        load_settings(None, topics={"otel_results": "x.otel"}, labels={"topic": "x.otel"})


# -- the Kafka sink: durable only once both are acknowledged ---------------------------------

class _Producer:
    """Records sends; acks per topic are futures the test resolves (``held``) or fails."""

    def __init__(self, *, held: frozenset[str] = frozenset(),
                 fail: dict[str, Exception] | None = None) -> None:
        self.sent: list[tuple[str, bytes | None, bytes]] = []
        self.acks: dict[str, asyncio.Future[None]] = {}
        self._held, self._fail = held, fail or {}

    async def send(self, topic: str, *, value: bytes, key: bytes | None,
                   headers: Any) -> asyncio.Future[None]:
        self.sent.append((topic, key, value))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if topic in self._fail:
            ack.set_exception(self._fail[topic])
        elif topic not in self._held:
            ack.set_result(None)
        self.acks[topic] = ack
        return ack


def _kafka_sink(producer: _Producer, **topics: str) -> KafkaSink:
    sink = KafkaSink(KafkaSettings(client_id="evalstream-eu"),
                     TopicSettings(results="res", dead_letter="dlq", **topics))
    sink._producer = producer  # type: ignore[assignment]
    return sink


async def test_the_kafka_sink_returns_only_once_both_writes_are_acknowledged() -> None:
    producer = _Producer(held=frozenset({"otel"}))
    publish = asyncio.create_task(
        _kafka_sink(producer, otel_results="otel").publish_result(_result()))
    for _ in range(20):  # both sends, and the result's ack, without the OTel ack
        await asyncio.sleep(0)
    assert [topic for topic, _, _ in producer.sent] == ["res", "otel"]
    assert producer.acks["res"].done()
    assert not publish.done()  # the OTel write is not durable yet
    producer.acks["otel"].set_result(None)
    await asyncio.wait_for(publish, 1)
    (_, res_key, _), (topic, key, value) = producer.sent
    assert (topic, key) == ("otel", res_key) == ("otel", TRACE.encode())
    request = ExportLogsServiceRequest.FromString(value)
    assert request.resource_logs[0].resource.attributes[0].value.string_value == "evalstream-eu"
    assert _record(request).trace_id.hex() == TRACE


async def test_a_refused_otel_write_fails_the_publish_and_off_means_one_write() -> None:
    producer = _Producer(fail={"otel": TopicAuthorizationFailedError()})
    with pytest.raises(SinkError, match="publish to otel failed: TopicAuthorizationFailed"):
        await _kafka_sink(producer, otel_results="otel").publish_result(_result())
    producer = _Producer()
    # True: no copy given up (the caller counts a False as one).
    assert await _kafka_sink(producer).publish_result(_result()) is True
    assert [topic for topic, _, _ in producer.sent] == ["res"]


async def test_an_otel_copy_refused_for_good_leaves_the_durable_result_published() -> None:
    # Raising would make the worker publish an error result standing in for a result that
    # is already on the results topic: two results under one result_id.
    producer = _Producer(fail={"otel": MessageSizeTooLargeError()})
    with capture_logs() as logs:
        # False: the copy was given up (the caller counts it).
        assert await _kafka_sink(producer, otel_results="otel").publish_result(_result()) is False
    assert [topic for topic, _, _ in producer.sent] == ["res", "otel"]
    assert [e["event"] for e in logs] == ["otel_result_rejected"]
    assert logs[0]["result_id"] == _result().result_id
    producer = _Producer(fail={"res": MessageSizeTooLargeError()})
    with pytest.raises(OutputRejectedError, match="res refused a record"):
        await _kafka_sink(producer, otel_results="otel").publish_result(_result())


async def test_a_result_refused_for_good_has_no_otel_copy() -> None:
    # A topic policy refusing the result at its ack, after a copy sent beside it was
    # written, left that copy with no result; the error result standing in for it added
    # its own: two copies under one result_id, one a score the results topic never had.
    producer = _Producer(held=frozenset({"res"}))
    publish = asyncio.create_task(
        _kafka_sink(producer, otel_results="otel").publish_result(_result()))
    for _ in range(20):
        await asyncio.sleep(0)
    assert [topic for topic, _, _ in producer.sent] == ["res"]  # the copy waits for the ack
    producer.acks["res"].set_exception(PolicyViolationError())
    with pytest.raises(OutputRejectedError, match=r"res refused a record .*PolicyViolation"):
        await asyncio.wait_for(publish, 1)
    assert [topic for topic, _, _ in producer.sent] == ["res"]


async def test_a_given_up_copy_is_counted_and_a_written_one_is_not() -> None:
    # The error line alone left an operator losing copies (e.g. an OTel topic with a lower
    # max.message.bytes) nothing to alert on.
    registry = CollectorRegistry()
    sink = _kafka_sink(_Producer(fail={"otel": MessageSizeTooLargeError()}),
                       otel_results="otel")
    outputs = Outputs(sink, Metrics(registry), [])
    assert registry.get_sample_value("evalstream_otel_results_rejected_total") == 0
    await outputs.result(_result())
    assert registry.get_sample_value("evalstream_otel_results_rejected_total") == 1
    assert registry.get_sample_value("evalstream_results_published_total",
                                     {"status": "ok"}) == 1
    sink._producer = _Producer()  # type: ignore[assignment]
    await outputs.result(_result())
    assert registry.get_sample_value("evalstream_otel_results_rejected_total") == 1
    assert await MemorySink(otel_encoding="otlp_proto").publish_result(_result()) is True


def test_a_session_result_is_attached_to_its_latest_trace_without_a_span() -> None:
    # A window spans several traces and spans: its merged event keeps the latest event's
    # trace id and no span id, so the record is parented to that trace only.
    from evalstream.app.sessions import merge_events
    from evalstream.events import TraceEvent

    first = f"{1:032x}"
    members = [TraceEvent(event_id=f"e{i}", trace_id=trace, span_id=f"{i + 1:016x}",
                          session_id="conv-1", input="q", output="a",
                          timestamp=datetime(2026, 11, 30, 12, i, tzinfo=UTC))
               for i, trace in enumerate([first, TRACE])]
    merged = merge_events("conv-1", members)
    record = _record(_proto(_result(event_id=merged.event_id, trace_id=merged.trace_id,
                                    span_id=merged.span_id, session_id="conv-1")))
    assert (record.trace_id.hex(), record.span_id) == (TRACE, b"")
