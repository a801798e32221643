"""``otlp_logs_json`` / ``otlp_logs_proto``: GenAI content sent to the OTLP logs signal, from
log records captured from REAL instrumentations (see ``test_formats_otlp_captured``): the
openai-v2 2.4b0 ``EVENT_ONLY`` mode (one ``gen_ai.client.inference.operation.details``
record per call) and OpenLLMetry 0.62.4 with ``use_attributes=False`` (one record per
message and per choice).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import RawRecord
from evalstream.formats import NEVER_SET, decoder_for
from evalstream.formats.base import Decoded
from tests.fixtures import otlp
from tests.unit.test_formats_otlp_captured import _logs_to_proto, content, expected

FORMATS = ("otlp_logs_json", "otlp_logs_proto")


def _decode(fmt: str, value: bytes, **options: Any) -> Decoded:
    decoder = decoder_for(InputTopic(topic="otlp_logs", format=fmt, **options))  # type: ignore[arg-type]
    return decoder(RawRecord(topic="otlp_logs", partition=0, offset=0, value=value,
                             timestamp=1_700_000_000_000))


def decode_both(doc: dict[str, Any], **options: Any) -> Decoded:
    """``doc`` decoded as otlp_logs_json and as otlp_logs_proto; both must agree."""
    as_json = _decode("otlp_logs_json", orjson.dumps(doc), **options)
    as_proto = _decode("otlp_logs_proto", _logs_to_proto(doc), **options)
    assert as_json.events == as_proto.events
    assert as_json.skipped == as_proto.skipped
    return as_json


def _records(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for rl in doc["resourceLogs"] for sl in rl["scopeLogs"] for r in sl["logRecords"]]


def _span_ids(name: str) -> set[tuple[str, str]]:
    doc = otlp.load(name)
    return {(s["traceId"], s["spanId"]) for rs in doc["resourceSpans"]
            for ss in rs["scopeSpans"] for s in ss["spans"]}


def test_openai_v2_details_records_give_one_event_per_call() -> None:
    doc = otlp.load("real_openai_v2_event_only_logs")
    decoded = decode_both(doc)

    # The failed call's record carries error.type: skipped as its span is.
    assert decoded.skipped == {"error_span": 1}
    got = sorted(repr(content(e)) for e in decoded.events)
    parts = expected("parts")
    want = [expected(c) for c in ("plain", "system", "multi_turn", "tool_call", "tool_result",
                                  "stream", "n2")]
    # openai-v2 2.4b0 writes list content as empty parts, on spans and events alike.
    want.append((None, parts[1], None, []))
    assert got == sorted(repr(w) for w in want)
    for event in decoded.events:
        assert event.app == "walk-bot"
        # The id its span gives (the same capture's spans): a call read from both the
        # traces and the logs topic gets the same result ids.
        assert event.event_id == f"{event.trace_id}-{event.span_id}"
        assert event.attributes["input_tokens"] == "21"
    assert {(e.trace_id, e.span_id) for e in decoded.events} <= _span_ids(
        "real_openai_v2_event_only")
    [plain] = [e for e in decoded.events if e.input == expected("plain")[0]]
    # As its span's, without span_name (a log record has none).
    assert plain.attributes == {
        "operation": "chat", "provider": "openai", "model": "gpt-4o-mini",
        "response_model": "gpt-4o-mini-2024-07-18", "input_tokens": "21", "output_tokens": "9",
        "response_id": "chatcmpl-abc123", "finish_reasons": "stop", "environment": "test"}
    record = next(r for r in _records(doc) if r["spanId"] == plain.span_id)
    assert "timeUnixNano" not in record  # the SDK sets only the observed time
    assert plain.timestamp is not None
    assert int(plain.timestamp.timestamp() * 1e6) == int(record["observedTimeUnixNano"]) // 1000


def test_openllmetry_message_records_are_grouped_per_call() -> None:
    doc = otlp.load("real_openllmetry_events_logs")
    decoded = decode_both(doc)

    # The streamed answer's choice has no span id: it cannot be joined to its call. That
    # call's prompt, and the failed call's (which wrote no answer and no error.type), are
    # half a call each: not scored (a half is no conversation to judge).
    assert decoded.skipped == {"no_span_id": 1, "partial_call": 2}
    got = sorted(repr(content(e)) for e in decoded.events)
    want = [expected(c) for c in ("plain", "system", "multi_turn", "tool_call", "tool_result",
                                  "n2", "parts")]
    # parts: the developer prompt comes as gen_ai.user.message with role "developer" in its
    # body: it is the system prompt, not a user turn.
    assert got == sorted(repr(w) for w in want)
    assert not {"Is it windy?", "Snow?"} & {e.input for e in decoded.events}
    by_input = {e.input: e for e in decoded.events}
    assert len(decoded.events) == 7
    assert {(e.trace_id, e.span_id) for e in decoded.events} <= _span_ids(
        "real_openllmetry_events")
    n2 = by_input["Sun or rain?"]
    assert n2.attributes == {"provider": "openai", "finish_reasons": "stop,stop",
                             "environment": "test"}
    assert n2.event_id == f"{n2.trace_id}-{n2.span_id}"
    # The group's time is its last record's (the answer).
    last = max(int(r["observedTimeUnixNano"]) for r in _records(doc)
               if r.get("spanId") == n2.span_id)
    assert n2.timestamp is not None
    assert int(n2.timestamp.timestamp() * 1e6) == last // 1000


def _app_log(body: str, **ids: str) -> dict[str, Any]:
    return {"timeUnixNano": "1796068225397203584", "severityNumber": 9, "severityText": "INFO",
            "body": {"stringValue": body}, **ids,
            "attributes": [{"key": "code.function", "value": {"stringValue": "handler"}}]}


def test_application_logs_and_other_events_are_skipped_and_counted() -> None:
    doc = otlp.load("real_openai_v2_event_only_logs")
    records = doc["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
    first = records[0]
    records.append(_app_log("GET /health 200"))
    records.append(_app_log("in a span", traceId=first["traceId"], spanId=first["spanId"]))
    records.append({"eventName": "browser.page_view", "traceId": first["traceId"],
                    "spanId": first["spanId"]})
    doc["resourceLogs"].append({"resource": {}, "scopeLogs": [
        {"scope": {"name": "app"}, "logRecords": [_app_log(f"line {n}") for n in range(3)]}]})

    decoded = decode_both(doc)

    assert decoded.skipped == {"error_span": 1, "not_genai": 6}
    assert len(decoded.events) == 8
    # Not merged into the call: the plain call's event is as without them.
    [plain] = [e for e in decoded.events if e.span_id == first["spanId"]]
    assert plain.attributes["model"] == "gpt-4o-mini"


def test_only_application_logs_give_no_event_and_no_empty_batch() -> None:
    doc = {"resourceLogs": [{"resource": {}, "scopeLogs": [
        {"logRecords": [_app_log("a"), _app_log("b")]}]}]}

    decoded = decode_both(doc)

    assert decoded.events == []
    assert decoded.skipped == {"not_genai": 2}
    assert decode_both({"resourceLogs": []}).skipped == {"empty_batch": 1}


def test_event_name_attribute_of_older_sdks_is_read() -> None:
    doc = otlp.load("real_openai_v2_event_only_logs")
    for record in _records(doc):
        record["attributes"].append(
            {"key": "event.name", "value": {"stringValue": record.pop("eventName")}})

    decoded = decode_both(doc)

    assert len(decoded.events) == 8
    assert decoded.skipped == {"error_span": 1}


def test_records_without_span_id_or_with_bad_ids_are_counted() -> None:
    doc = otlp.load("real_openllmetry_events_logs")
    records = _records(doc)
    plain = [r for r in records if r.get("spanId") == "114c4af96dbdb6fd"]
    for record in plain:
        record["traceId"] = "not-hex" + record["traceId"][7:]

    as_json = _decode("otlp_logs_json", orjson.dumps(doc))

    # JSON-only: protobuf ids are bytes (a bad one cannot reach the proto decoder this way).
    assert as_json.skipped == {"no_span_id": 1, "bad_span": len(plain), "partial_call": 2}
    assert len(as_json.events) == 6


def test_all_zero_span_ids_are_outside_any_span() -> None:
    # OTLP: an all-zero span id is invalid, "not associated with a span" (older Python SDKs
    # encoded a record outside a span so). Grouped as a call, records of unrelated calls
    # would merge into one event: one call's question with another's answer.
    doc = copy.deepcopy(otlp.load("real_openllmetry_events_logs"))
    records = _records(doc)
    question = next(r for r in records if r.get("spanId") == "114c4af96dbdb6fd"
                    and r["eventName"] == "gen_ai.user.message")
    answer = next(r for r in records if r.get("spanId") == "94d70119f6047814"
                  and r["eventName"] == "gen_ai.choice")
    for record in (question, answer):
        record["traceId"], record["spanId"] = "0" * 32, "0" * 16

    decoded = decode_both(doc)

    # The two calls that lost a record are half calls now, as the fixture's other two.
    assert decoded.skipped == {"no_span_id": 3, "partial_call": 4}
    assert not [e for e in decoded.events if e.span_id == "0" * 16]
    assert ("What is the weather like today?", "Answer to: Will it rain tomorrow?") not in {
        (e.input, e.output) for e in decoded.events}


def test_a_malformed_body_costs_its_call_only() -> None:
    doc = otlp.load("real_openllmetry_events_logs")
    records = _records(doc)
    bad = next(r for r in records if r.get("spanId") == "114c4af96dbdb6fd")
    bad["body"] = {"kvlistValue": {"values": [{"key": "content", "value": {"intValue": "x"}}]}}

    decoded = _decode("otlp_logs_json", orjson.dumps(doc))

    assert decoded.skipped == {"no_span_id": 1, "bad_span": 1, "partial_call": 2}
    assert len(decoded.events) == 6


@pytest.mark.parametrize(("fmt", "value", "reason"), [
    ("otlp_logs_json", b"{not json", "invalid_json"),
    ("otlp_logs_json", b"[1, 2]", "not_otlp"),
    ("otlp_logs_json", b'{"resourceLogs": {"a": 1}}', "not_otlp"),
    # A trace batch on a logs input (the Collector's traces topic configured here).
    ("otlp_logs_json", otlp.raw("real_openai_v2_span_only"), "not_otlp"),
    ("otlp_logs_proto", b"\xff\xff\xff", "invalid_protobuf"),
    # A trace batch: these spans' names do not parse as a log record's body (field 5);
    # other names can (e.g. "POST"), and the batch then reads as not_genai records.
    ("otlp_logs_proto", otlp.to_proto(otlp.load("real_openai_v2_span_only")),
     "invalid_protobuf"),
    ("otlp_logs_proto", b"\x10\x01", "not_otlp"),  # parses: one unknown field
])
def test_a_message_that_is_not_a_log_batch_is_dead_lettered(fmt: str, value: bytes,
                                                           reason: str) -> None:
    with pytest.raises(DecodeError) as raised:
        _decode(fmt, value)
    assert raised.value.reason == reason


@pytest.mark.parametrize("fmt", FORMATS)
def test_tombstone_is_dead_lettered(fmt: str) -> None:
    decoder = decoder_for(InputTopic(topic="otlp_logs", format=fmt))  # type: ignore[arg-type]
    with pytest.raises(DecodeError) as raised:
        decoder(RawRecord(topic="otlp_logs", partition=0, offset=0, value=None))
    assert raised.value.reason == "empty_message"


@pytest.mark.parametrize("fmt", FORMATS)
def test_config_accepts_the_formats_with_otlp_options_only(fmt: str) -> None:
    topic = InputTopic(topic="otlp_logs", format=fmt,  # type: ignore[arg-type]
                       attribute_map={"tenant": "tenant.id"})
    assert topic.format == fmt
    assert NEVER_SET[fmt] == {"reference"}
    with pytest.raises(ValidationError, match="mapping: for flat_json inputs only"):
        InputTopic(topic="otlp_logs", format=fmt, mapping={"input": "q"})  # type: ignore[arg-type]


def test_topic_options_apply_to_log_events() -> None:
    doc = copy.deepcopy(otlp.load("real_openai_v2_event_only_logs"))
    doc["resourceLogs"][0]["resource"]["attributes"].append(
        {"key": "tenant.id", "value": {"stringValue": "acme"}})

    decoded = decode_both(doc, attribute_map={"tenant": "tenant.id"},
                          app_attribute="tenant.id")

    assert {e.attributes["tenant"] for e in decoded.events} == {"acme"}
    assert {e.app for e in decoded.events} == {"acme"}


def test_a_call_split_over_two_messages_is_not_scored_as_two_halves() -> None:
    # SDKs export log batches on a timer: a call's prompt records (written before the call)
    # and its choice (after it) can land in two messages. Each half used to become an event
    # under the call's id: two results with one result id, each judging half a call.
    doc = otlp.load("real_openllmetry_events_logs")
    records = _records(doc)
    call = [r for r in records if r.get("spanId") == "94d70119f6047814"]
    prompt = [r for r in call if r["eventName"] != "gen_ai.choice"]
    answer = [r for r in call if r["eventName"] == "gen_ai.choice"]
    assert prompt
    assert answer

    def only(kept: list[dict[str, Any]]) -> dict[str, Any]:
        part = copy.deepcopy(doc)
        part["resourceLogs"][0]["scopeLogs"][0]["logRecords"] = copy.deepcopy(kept)
        return part

    for half in (prompt, answer):
        decoded = decode_both(only(half))
        assert decoded.events == []
        assert decoded.skipped == {"partial_call": 1}
    whole = decode_both(only(call))
    assert [e.span_id for e in whole.events] == ["94d70119f6047814"]

