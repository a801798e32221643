"""Property: every input decoder, given any bytes, returns events (or ``SAMPLED_OUT``) or
raises ``DecodeError`` with a reason from its documented set; never another exception.

The Intake turns any other exception into a ``decoder_error`` dead letter, so the worker
survives it, but that is a decoder bug: these tests call the decoders directly to find them.
Inputs: arbitrary bytes, odd-but-valid JSON and protobuf, mutations of the fixtures and the
demo's events, and span attributes of every convention (semconv, OpenLLMetry,
OpenInference, span events) filled with arbitrary values.
"""

from __future__ import annotations

import base64
import json
import math
import random
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from prometheus_client import CollectorRegistry

from evalstream.app.intake import Intake
from evalstream.app.pipeline import Pipeline
from evalstream.app.traffic import APPS, make_event
from evalstream.config import InputTopic, Settings
from evalstream.errors import DecodeError
from evalstream.events import RawRecord, TraceEvent, dump_json
from evalstream.formats import Decoder, decoder_for
from evalstream.formats.base import Decoded
from evalstream.formats.flat_json import SAMPLED_OUT, FlatJsonDecoder
from evalstream.judges.builtin import BuiltinJudge
from evalstream.metrics import Metrics
from tests.fixtures import otlp
from tests.support.fuzz import (
    FUZZ,
    adversarial_text,
    json_bytes,
    json_values,
    mutate,
    odd_json_documents,
    strict_json_values,
    strict_text,
)
from tests.support.probe import sampling_probe

#: The documented ``DecodeError`` reasons of each decoder (module docstrings).
FLAT_REASONS = {"empty", "invalid_utf8", "invalid_json", "not_an_object", "missing_output",
                "invalid_field"}
OTLP_JSON_REASONS = {"empty_message", "invalid_json", "not_otlp", "too_many_containers"}
OTLP_PROTO_REASONS = {"empty_message", "invalid_protobuf", "not_otlp", "too_many_containers"}

#: A custom mapping that reaches into nested objects and lists.
MAPPING = {"output": "response.text", "input": "request.input",
           "messages": "request.messages", "trace_id": "meta.0.trace",
           "attributes": "meta.1", "context": "docs", "timestamp": "meta.0.ts",
           "session_id": "meta.0.session"}
OTLP_OPTIONS: dict[str, Any] = {"session_attribute": "my.session", "app_attribute": "my.app",
                                "attribute_map": {"tenant": "tenant.id", "model": "my.model"}}

FLAT = decoder_for(InputTopic(topic="t"))
FLAT_MAPPED = decoder_for(InputTopic(topic="t", mapping=MAPPING))
OTLP_JSON = decoder_for(InputTopic(topic="t", format="otlp_json", **OTLP_OPTIONS))
OTLP_PROTO = decoder_for(InputTopic(topic="t", format="otlp_proto", **OTLP_OPTIONS))
DECODERS: dict[str, tuple[Decoder, set[str]]] = {
    "flat_json": (FLAT, FLAT_REASONS),
    "flat_json_mapped": (FLAT_MAPPED, FLAT_REASONS),
    "otlp_json": (OTLP_JSON, OTLP_JSON_REASONS),
    "otlp_proto": (OTLP_PROTO, OTLP_PROTO_REASONS),
    # Log batches (GenAI events): the same reasons as their trace counterparts.
    "otlp_logs_json": (decoder_for(InputTopic(topic="t", format="otlp_logs_json",
                                              **OTLP_OPTIONS)), OTLP_JSON_REASONS),
    "otlp_logs_proto": (decoder_for(InputTopic(topic="t", format="otlp_logs_proto",
                                               **OTLP_OPTIONS)), OTLP_PROTO_REASONS),
}
#: A marker put in content: error messages must never quote it.
MARKER = "SECRET-CONTENT-7f3a"
#: Kafka timestamps are any int64 (a producer sets CreateTime), or absent.
kafka_timestamps = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1),
                             st.sampled_from([0, -1, 1_767_225_600_000]))


def _record(value: bytes | None, timestamp: int | None = None) -> RawRecord:
    return RawRecord("t", 0, 7, value, timestamp=timestamp)


def outcome(decode: Callable[[RawRecord], Decoded], record: RawRecord) -> Decoded | DecodeError:
    """What ``decode`` made of ``record``: events, or the dead letter's error. Any other
    exception propagates: that is the bug these tests look for."""
    try:
        return decode(record)
    except DecodeError as exc:
        return exc


def check(name: str, value: bytes | None, timestamp: int | None = None) -> Decoded | None:
    """Decode with decoder ``name``; assert the contract; the result or None (dead letter)."""
    decoder, reasons = DECODERS[name]
    decoded = outcome(decoder, _record(value, timestamp))
    if isinstance(decoded, DecodeError):
        assert decoded.reason in reasons, (decoded.reason, str(decoded))
        assert MARKER not in str(decoded)
        assert 0 < len(str(decoded)) <= 2_000  # clear, and fit for a log line
        return None
    assert isinstance(decoded, Decoded)
    for event in decoded.events:
        assert isinstance(event, TraceEvent)
        dump_json(event)  # what the pipeline and a results key need: serialisable as is
    if name.startswith("flat_json"):
        assert len(decoded.events) == 1
    else:  # every message leaves a trace in the metrics
        assert decoded.events or sum(decoded.skipped.values()) >= 1
    return decoded


# --- arbitrary and odd bytes, every decoder ------------------------------------------------

@pytest.mark.parametrize("name", sorted(DECODERS))
@FUZZ
@given(value=st.one_of(st.binary(max_size=300), json_bytes(), odd_json_documents),
       timestamp=kafka_timestamps)
def test_any_bytes(name: str, value: bytes, timestamp: int | None) -> None:
    check(name, value, timestamp)


@pytest.mark.parametrize("name", sorted(DECODERS))
def test_no_value_and_empty_value(name: str) -> None:
    for value in (None, b""):
        check(name, value)


# --- flat_json: wrong types at every field, realistic events mutated ------------------------

FIELDS = ("event_id", "trace_id", "span_id", "session_id", "app", "system_prompt", "messages",
          "input", "output", "context", "reference", "attributes", "timestamp")

message_like = st.fixed_dictionaries(
    {}, optional={"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]),
                                    json_values),
                  "content": st.one_of(adversarial_text, json_values,
                                       st.lists(st.fixed_dictionaries(
                                           {}, optional={"type": json_values,
                                                         "text": json_values}), max_size=3))})
flat_fields = st.fixed_dictionaries(
    {}, optional={**{f: st.one_of(json_values, adversarial_text) for f in FIELDS},
                  "messages": st.one_of(json_values, st.lists(message_like, max_size=4)),
                  "attributes": st.one_of(json_values, st.dictionaries(
                      adversarial_text, json_values, max_size=4))})


def _demo_events() -> list[dict[str, Any]]:
    rng = random.Random(3)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return [make_event(app, rng, now, incident=i % 2 == 1, session_id=f"s{i}")
            for i, app in enumerate(APPS)]


DEMO = _demo_events()


def _mapped(event: dict[str, Any]) -> dict[str, Any]:
    """A demo event in the nested layout :data:`MAPPING` reads."""
    return {"response": {"text": event["output"]},
            "request": {"input": event["input"], "messages": event["messages"]},
            "meta": [{"trace": event["trace_id"], "ts": event["timestamp"],
                      "session": event["session_id"]}, event["attributes"]],
            "docs": ["a document"]}


@pytest.mark.parametrize("name", ["flat_json", "flat_json_mapped"])
@FUZZ
@given(fields=flat_fields, lenient=st.booleans(), timestamp=kafka_timestamps)
def test_flat_json_any_field_values(name: str, fields: dict[str, Any], lenient: bool,
                                    timestamp: int | None) -> None:
    if name == "flat_json_mapped":
        fields = {"response": {"text": fields.pop("output", None)},
                  "request": {"input": fields.pop("input", None),
                              "messages": fields.pop("messages", None)},
                  "meta": [{"trace": fields.pop("trace_id", None),
                            "ts": fields.pop("timestamp", None)},
                           fields.pop("attributes", None)],
                  **fields}
    check(name, _lenient(fields, escape=lenient), timestamp)


def _lenient(value: Any, *, escape: bool = False) -> bytes:
    """``value`` as orjson writes it, else as ``json`` does (surrogates, huge integers and
    NaN written anyway: raw, or as escapes with ``escape``)."""
    if not escape:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass
    return json.dumps(value, ensure_ascii=escape).encode("utf-8", "surrogatepass")


@FUZZ
@given(data=st.data(), which=st.integers(0, len(DEMO) - 1), timestamp=kafka_timestamps)
def test_flat_json_mutated_demo_events(data: st.DataObject, which: int,
                                       timestamp: int | None) -> None:
    event = data.draw(mutate(DEMO[which]))
    check("flat_json", _lenient(event), timestamp)
    check("flat_json_mapped", _lenient(data.draw(mutate(_mapped(DEMO[which])))), timestamp)


# --- flat_json's sampling shortcuts agree with the full decoder -----------------------------

KEYS = ("trace_id", "session_id", "event_id")


def _flat_inputs() -> st.SearchStrategy[bytes]:
    mutated = st.integers(0, len(DEMO) - 1).flatmap(lambda i: mutate(DEMO[i]))
    return st.one_of(
        mutated.map(_lenient),
        flat_fields.map(_lenient),
        odd_json_documents,
    )


@FUZZ
@given(value=_flat_inputs(), key=st.sampled_from(KEYS), keep=st.booleans())
def test_flat_json_sampling_paths_never_crash(value: bytes, key: str, keep: bool) -> None:
    decoder = FLAT
    assert isinstance(decoder, FlatJsonDecoder)
    decoded = outcome(partial(decoder.decode, key=key, keep=lambda _: keep), _record(value))
    if isinstance(decoded, DecodeError):
        assert decoded.reason in FLAT_REASONS
    else:
        assert decoded is SAMPLED_OUT if not keep else len(decoded.events) == 1


@FUZZ
@given(value=_flat_inputs(), key=st.sampled_from(KEYS))
def test_flat_json_probe_accepts_only_what_decode_accepts(value: bytes, key: str) -> None:
    decoder = FLAT
    assert isinstance(decoder, FlatJsonDecoder)
    probe = sampling_probe(decoder, key)
    assert probe is not None
    found = probe(value)  # never raises
    if found is None:
        return
    # Documented: a message the probe accepts is one decode accepts with the same key
    # (timestamps excepted: they are parsed only for sampled events).
    decoded = outcome(partial(decoder.decode, key=key, keep=lambda _: True), _record(value))
    if isinstance(decoded, DecodeError):
        assert decoded.reason == "invalid_field"
        assert str(decoded).startswith("timestamp:"), str(decoded)
        return
    event = decoded.events[0]
    assert (getattr(event, key) or event.event_id) == found


# --- OTLP: fixtures mutated, arbitrary attribute values in every convention -----------------

FIXTURES = ("semconv_json_strings", "semconv_structured", "legacy_openllmetry",
            "openinference", "span_events", "bad_spans")


@FUZZ
@given(data=st.data(), name=st.sampled_from(FIXTURES), timestamp=kafka_timestamps)
def test_otlp_json_mutated_fixtures(data: st.DataObject, name: str,
                                    timestamp: int | None) -> None:
    doc = data.draw(mutate(otlp.load(name)))
    check("otlp_json", orjson.dumps(doc), timestamp)


@FUZZ
@given(name=st.sampled_from(FIXTURES[:-1]), edits=st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255),
              st.sampled_from(["set", "cut", "insert"])), min_size=1, max_size=4))
def test_otlp_proto_corrupted_fixture_bytes(name: str,
                                            edits: list[tuple[float, int, str]]) -> None:
    data = bytearray(otlp.to_proto(otlp.load(name)))
    for where, byte, op in edits:
        at = int(where * len(data)) if data else 0
        if op == "set" and data:
            data[at] = byte
        elif op == "cut":
            del data[max(at, 1):]
        else:
            data.insert(at, byte)
    check("otlp_proto", bytes(data))


# Span attributes the readers look at, by convention.
CONTENT_KEYS = (
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt.0.content", "gen_ai.prompt.0.role", "gen_ai.prompt.0.user",
    "gen_ai.prompt.1.content", "gen_ai.completion.0.content", "gen_ai.completion.0.role",
    "gen_ai.completion.0.finish_reason", "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.content",
    "llm.input_messages.0.message.contents.0.message_content.text",
    "llm.input_messages.0.message.contents.0.message_content.type",
    "llm.output_messages.0.message.content", "llm.output_messages.0.message.role",
    "input.value", "output.value", "input.mime_type", "output.mime_type",
    "retrieval.documents.0.document.content", "gen_ai.retrieval.documents",
)
META_KEYS = (
    "gen_ai.operation.name", "openinference.span.kind", "llm.request.type",
    "traceloop.span.kind", "gen_ai.system", "gen_ai.request.model", "gen_ai.response.model",
    "gen_ai.usage.input_tokens", "gen_ai.response.finish_reasons", "gen_ai.conversation.id",
    "session.id", "user.id", "my.session", "my.app", "tenant.id", "my.model",
)
EVENT_NAMES = ("gen_ai.system.message", "gen_ai.user.message", "gen_ai.assistant.message",
               "gen_ai.tool.message", "gen_ai.choice",
               "gen_ai.client.inference.operation.details", "gen_ai.content.prompt",
               "gen_ai.content.completion", "exception")
EVENT_KEYS = ("gen_ai.event.content", "content", "message", "finish_reason", "gen_ai.prompt",
              "gen_ai.completion", "gen_ai.input.messages", "gen_ai.output.messages",
              "gen_ai.system_instructions")
PART_TYPES = ("text", "input_text", "output_text", "tool_call", "tool_call_response",
              "reasoning", "image")

#: Cheap leaves for the message shapes below (hypothesis spends its time drawing values:
#: deep random trees at every leaf made these tests take ten times as long).
leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**64 - 1),
                 st.sampled_from([1.5, -0.0, 1e308]), strict_text, st.just([]), st.just({}))
_part = st.fixed_dictionaries({}, optional={
    "type": st.one_of(st.sampled_from(PART_TYPES), leaf),
    "content": leaf, "text": leaf,
    "response": leaf, "result": leaf})
_message = st.fixed_dictionaries({}, optional={
    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "model"]),
                      leaf),
    "parts": st.one_of(st.lists(_part, max_size=3), leaf),
    "content": st.one_of(strict_text, st.lists(_part, max_size=3), leaf),
    "finish_reason": leaf,
    "message": st.fixed_dictionaries({}, optional={"content": leaf,
                                                   "parts": st.lists(_part, max_size=2)}),
})
#: Request/response bodies as OpenInference ``input.value`` / ``output.value`` record them.
_body = st.fixed_dictionaries({}, optional={
    "choices": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
        "message": st.one_of(_message, leaf), "text": leaf}),
        max_size=2), leaf),
    "messages": st.one_of(st.lists(_message, max_size=3), leaf),
    "type": st.sampled_from(["message", "response", 5]),
    "content": st.one_of(st.lists(_part, max_size=3), leaf),
    "output": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["message", "reasoning"]),
        "content": st.one_of(st.lists(_part, max_size=2), leaf)}),
        max_size=2), leaf),
    "generations": st.one_of(st.lists(st.lists(st.fixed_dictionaries(
        {}, optional={"text": leaf}), max_size=2), max_size=2),
        leaf),
    "input": st.one_of(strict_text, st.lists(_message, max_size=2), leaf),
    "prompt": leaf, "prompts": leaf,
})
#: A Python value an attribute may hold: structured, as a JSON string, or anything.
attribute_values: st.SearchStrategy[Any] = st.one_of(
    st.lists(_message, max_size=3),
    st.lists(_message, max_size=3).map(lambda v: orjson.dumps(v).decode()),
    _body.map(lambda v: orjson.dumps(v).decode()),
    _message, strict_json_values, adversarial_text,
    st.binary(max_size=8),
)


def _json_any(value: Any) -> dict[str, Any]:
    """A Python value as an OTLP/JSON ``AnyValue``."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value if math.isfinite(value) else str(value)}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_json_any(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _json_any(v)}
                                           for k, v in value.items()]}}
    if value is None:
        return {}
    return {"stringValue": value}


def _proto_any(value: Any, out: AnyValue) -> None:
    """A Python value into a protobuf ``AnyValue`` (what cannot be said is left unset)."""
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        if -(2**63) <= value < 2**63:
            out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, list):
        out.array_value.SetInParent()
        for v in value:
            _proto_any(v, out.array_value.values.add())
    elif isinstance(value, dict):
        out.kvlist_value.SetInParent()
        for k, v in value.items():
            kv = out.kvlist_value.values.add(key=_proto_text(k))
            _proto_any(v, kv.value)
    elif isinstance(value, str):
        out.string_value = _proto_text(value)


def _proto_text(text: str) -> str:
    # Protobuf strings are UTF-8 on the wire: a lone surrogate cannot be sent.
    return text.encode("utf-8", "replace").decode("utf-8")


#: Odd OTLP/JSON ``AnyValue`` objects no encoder writes, but a message may hold.
JUNK_ANY: list[Any] = [None, 1, "x", [], [1], {"stringValue": 5}, {"intValue": "abc"},
                       {"intValue": "1e999"}, {"doubleValue": "nope"}, {"arrayValue": 3},
                       {"arrayValue": {"values": 3}}, {"kvlistValue": {"values": [{}]}},
                       {"kvlistValue": {"values": [{"key": []}]}}, {"bytesValue": "!!"},
                       {"boolValue": "true"}, {"unknownValue": 1}]

span_attributes = st.dictionaries(
    st.sampled_from(CONTENT_KEYS + META_KEYS),
    st.one_of(attribute_values, st.sampled_from(["chat", "llm", "LLM", "retriever", "tool"])),
    max_size=6)
span_events = st.lists(st.tuples(
    st.sampled_from(EVENT_NAMES),
    st.dictionaries(st.sampled_from(EVENT_KEYS), attribute_values, max_size=3)), max_size=2)
spans = st.fixed_dictionaries({
    "attributes": span_attributes,
    "events": span_events,
    "trace": st.sampled_from(["0af7651916cd43dd8448eb211c80319c", "", "zz" * 16, "ab"]),
    "span": st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7", "", "x" * 16]),
    "parent": st.sampled_from(["", "b7ad6b7169203331", "00f067aa0ba902b7"]),
    "start": st.integers(0, 2**64 - 1), "end": st.integers(0, 2**64 - 1),
    "status": st.sampled_from([0, 1, 2]),
    "name": st.sampled_from(["", "chat gpt-4o", "\ud800", "x" * 300]),
})
resources = st.dictionaries(st.sampled_from(("service.name", "my.app", "session.id",
                                             "deployment.environment", "tenant.id",
                                             "openinference.project.name")),
                            attribute_values, max_size=3)


def _otlp_json(resource: dict[str, Any], span_list: list[dict[str, Any]],
               junk: Any = None) -> bytes:
    out = []
    for s in span_list:
        attrs = [{"key": k, "value": _json_any(v)} for k, v in s["attributes"].items()]
        if junk is not None:
            attrs.append({"key": "gen_ai.input.messages", "value": junk})
        out.append({
            "traceId": s["trace"], "spanId": s["span"], "parentSpanId": s["parent"],
            "name": s["name"], "startTimeUnixNano": str(s["start"]),
            "endTimeUnixNano": str(s["end"]), "status": {"code": s["status"]},
            "attributes": attrs,
            "events": [{"name": n, "attributes": [{"key": k, "value": _json_any(v)}
                                                  for k, v in a.items()]}
                       for n, a in s["events"]]})
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": k, "value": _json_any(v)}
                                    for k, v in resource.items()]},
        "scopeSpans": [{"scope": {"name": "fuzz"}, "spans": out}]}]}
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)


def _otlp_proto(resource: dict[str, Any], span_list: list[dict[str, Any]]) -> bytes:
    data = TracesData()
    rs = data.resource_spans.add()
    for k, v in resource.items():
        _proto_any(v, rs.resource.attributes.add(key=k).value)
    ss = rs.scope_spans.add()
    for s in span_list:
        span = ss.spans.add(name=_proto_text(s["name"]), start_time_unix_nano=s["start"],
                            end_time_unix_nano=s["end"])
        span.status.code = s["status"]
        for field, hex_id in (("trace_id", s["trace"]), ("span_id", s["span"]),
                              ("parent_span_id", s["parent"])):
            try:
                setattr(span, field, bytes.fromhex(hex_id))
            except ValueError:
                setattr(span, field, hex_id.encode())
        for k, v in s["attributes"].items():
            _proto_any(v, span.attributes.add(key=k).value)
        for name, attrs in s["events"]:
            event = span.events.add(name=name)
            for k, v in attrs.items():
                _proto_any(v, event.attributes.add(key=k).value)
    return data.SerializeToString()


def _json_safe(value: Any) -> bool:
    try:
        orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return False
    return True


@FUZZ
@given(resource=resources, span_list=st.lists(spans, min_size=1, max_size=2),
       junk=st.one_of(st.none(), st.sampled_from(JUNK_ANY)), timestamp=kafka_timestamps)
def test_otlp_json_spans_of_every_convention(resource: dict[str, Any],
                                             span_list: list[dict[str, Any]], junk: Any,
                                             timestamp: int | None) -> None:
    doc = {"r": resource, "s": span_list}
    if _json_safe(doc):
        check("otlp_json", _otlp_json(resource, span_list, junk), timestamp)


@FUZZ
@given(resource=resources, span_list=st.lists(spans, min_size=1, max_size=2),
       timestamp=kafka_timestamps)
def test_otlp_proto_spans_of_every_convention(resource: dict[str, Any],
                                              span_list: list[dict[str, Any]],
                                              timestamp: int | None) -> None:
    check("otlp_proto", _otlp_proto(resource, span_list), timestamp)


def test_the_span_generators_reach_events() -> None:
    """The generators above are not vacuous: a plain semconv chat span decodes to an event
    through both encodings."""
    span = {"attributes": {"gen_ai.operation.name": "chat",
                           "gen_ai.input.messages": '[{"role": "user", "content": "hi"}]',
                           "gen_ai.output.messages": [{"role": "assistant",
                                                       "parts": [{"type": "text",
                                                                  "content": "hello"}]}]},
            "events": [], "trace": "0af7651916cd43dd8448eb211c80319c",
            "span": "b7ad6b7169203331", "parent": "", "start": 1, "end": 2, "status": 0,
            "name": "chat"}
    for name, value in (("otlp_json", _otlp_json({}, [span])),
                        ("otlp_proto", _otlp_proto({}, [span]))):
        decoded = check(name, value)
        assert decoded is not None
        assert [(e.input, e.output) for e in decoded.events] == [("hi", "hello")], name



# --- the record's Kafka timestamp is metadata: it never costs an event ----------------------

def _timeless_otlp() -> bytes:
    """A fixture whose spans carry no times, so their events take the record's."""
    doc = otlp.load("semconv_structured")
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                span.pop("startTimeUnixNano", None)
                span.pop("endTimeUnixNano", None)
    return orjson.dumps(doc)


TIMELESS = _timeless_otlp()


@FUZZ
@given(timestamp=st.integers(-(2**63), 2**63 - 1))
def test_any_record_timestamp_keeps_the_events(timestamp: int) -> None:
    flat = check("flat_json", b'{"output": "hi"}', timestamp)
    assert flat is not None
    for name in ("otlp_json", "otlp_proto"):
        value = TIMELESS if name == "otlp_json" else otlp.to_proto(orjson.loads(TIMELESS))
        decoded = check(name, value, timestamp)
        assert decoded is not None
        assert len(decoded.events) == 1, decoded.skipped
        assert "bad_span" not in decoded.skipped


@pytest.mark.parametrize("timestamp", [2**62, -(2**62), 300_000_000_000_000_000, -5])
def test_out_of_range_record_timestamp_is_no_timestamp(timestamp: int) -> None:
    """Before the fix, a producer's bogus CreateTime dead-lettered a good flat_json message
    (``invalid_field: timestamp``) and dropped timeless OTLP spans as ``bad_span``."""
    flat = FLAT(_record(b'{"output": "hi"}', timestamp))
    assert flat.events[0].timestamp is None
    spans = OTLP_JSON(_record(TIMELESS, timestamp))
    assert [e.timestamp for e in spans.events] == [None]


def test_in_range_record_timestamp_is_the_event_time() -> None:
    ms = 1_767_225_600_000
    expected = datetime(2026, 1, 1, tzinfo=UTC)
    assert FLAT(_record(b'{"output": "hi"}', ms)).events[0].timestamp == expected
    assert [e.timestamp for e in OTLP_JSON(_record(TIMELESS, ms)).events] == [expected]


# --- the Intake: no decoder failure reaches it as ``decoder_error`` -------------------------

def _intake(key: str) -> Intake:
    settings = Settings.model_validate({
        "inputs": [{"topic": "flat"}, {"topic": "mapped", "mapping": MAPPING},
                   {"topic": "oj", "format": "otlp_json"},
                   {"topic": "op", "format": "otlp_proto"}],
        "sampling": {"key": key},
        # Below rate 1, so the flat_json probe and the decoders' sampling shortcut run.
        "routes": [{"name": "main", "sample_rate": 0.5, "evaluators": [{"evaluator": "refusal"}]}],
        "worker": {"max_message_bytes": 100_000},
    })
    metrics = Metrics(CollectorRegistry())
    return Intake(settings, Pipeline(settings, {"builtin": BuiltinJudge()}, metrics), metrics)


INTAKES = {key: _intake(key) for key in ("trace_id", "session_id", "message_key")}


@FUZZ
@given(key=st.sampled_from(sorted(INTAKES)), topic=st.sampled_from(["flat", "mapped", "oj", "op"]),
       value=st.one_of(st.none(), st.binary(max_size=200), json_bytes(), odd_json_documents,
                       _flat_inputs(), st.just(TIMELESS)),
       record_key=st.one_of(st.none(), st.binary(max_size=8)), timestamp=kafka_timestamps)
def test_intake_never_wraps_a_decoder_failure(key: str, topic: str, value: bytes | None,
                                              record_key: bytes | None,
                                              timestamp: int | None) -> None:
    intake = INTAKES[key]
    record = RawRecord(topic, 0, 3, value, key=record_key, timestamp=timestamp)
    if intake.to_decode is not None and not intake.to_decode(topic, [record]):
        return
    decoded = outcome(partial(intake.decode, presampled=bool(record_key)), record)
    if isinstance(decoded, DecodeError):
        assert decoded.reason != "decoder_error", decoded.__cause__
        assert decoded.reason in FLAT_REASONS | OTLP_JSON_REASONS | OTLP_PROTO_REASONS | {
            "too_large"}


@pytest.mark.parametrize("body", [
    {"output": "a", "messages": [1] * 5000},
    {"output": "a", "context": [1] * 5000, "attributes": {str(i): [i] for i in range(100)}},
])
def test_many_wrong_items_make_a_short_error(body: dict[str, Any]) -> None:
    """Every wrong item was listed: a 1 MB message of 500,000 made a 14 MB error (logged
    with the dead letter) and took ~8 s of the event loop on the path without the sampling
    shortcut (``sampling.key: message_key``)."""
    decoded = outcome(FLAT, _record(orjson.dumps(body)))
    assert isinstance(decoded, DecodeError)
    assert decoded.reason == "invalid_field"
    assert len(str(decoded)) < 200, len(str(decoded))
    assert str(decoded).startswith(("messages: wrong type", "context: wrong type"))


@pytest.mark.parametrize("depth", [10, 60, 3000])
def test_deeply_nested_protobuf_values_are_decoded_or_dead_lettered(depth: int) -> None:
    """Protobuf's parser stops at 100 levels of messages (each array level is two), so a
    deep value is a whole-message ``invalid_protobuf`` dead letter (where OTLP/JSON drops
    only its span): not a crash, and the bytes are kept."""
    data = TracesData()
    span = data.resource_spans.add().scope_spans.add().spans.add(
        trace_id=b"1" * 16, span_id=b"2" * 8)
    span.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
    output = span.attributes.add(key="gen_ai.output.messages").value
    output.string_value = '[{"role": "assistant", "content": "hi"}]'
    value = span.attributes.add(key="gen_ai.input.messages").value
    for _ in range(depth):
        value = value.array_value.values.add()
    value.string_value = "x"
    decoded = check("otlp_proto", data.SerializeToString())
    if depth < 40:
        assert decoded is not None
        assert decoded.skipped == {"bad_span": 1}  # the nested list is not a message list
    else:
        assert decoded is None


@pytest.mark.parametrize(("path", "found"), [("a.²", None), ("a.٠", "x"), ("a.0", "x")])
def test_mapping_list_index_of_any_digit_never_crashes(path: str, found: str | None) -> None:
    """A mapping path part that ``str.isdigit`` accepts but ``int`` does not ("²") raised
    ValueError on every message with a list there (``decoder_error`` at the Intake)."""
    decoder = decoder_for(InputTopic(topic="t", mapping={"output": path}))
    decoded = outcome(decoder, _record(b'{"a": ["x"]}'))
    if found is None:
        assert isinstance(decoded, DecodeError)
        assert decoded.reason == "missing_output"
    else:
        assert isinstance(decoded, Decoded)
        assert decoded.events[0].output == found
