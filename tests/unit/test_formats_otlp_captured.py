"""Spans captured from REAL OpenAI instrumentations (not written from docs), decoded as the
Collector's ``otlp_json`` and ``otlp_proto`` messages.

How they were captured: the ``openai`` 3.57.0 client called a local OpenAI-compatible
stdlib server (chat completions: plain, system prompt, multi-turn, a tool call and its
result, streaming with usage, multimodal ``parts`` with a ``developer`` prompt, ``n=2``, a
400 error; Responses API: ``instructions`` + string, a message list, a list with an
``item_reference``, a reasoning model's answer), spans kept by opentelemetry-sdk 1.45.2's
``InMemorySpanExporter`` (logs by ``InMemoryLogRecordExporter``), encoded by
opentelemetry-exporter-otlp-proto-common 1.45.2 (``ExportTraceServiceRequest``) and written
as OTLP/JSON the way the Collector's ``otlp_json`` does (hex ids, integer enums). Ids and
attributes are as captured; the text is the test's own. Resource: ``service.name=walk-bot``,
``deployment.environment.name=test``.

* ``real_openai_v2_*``: opentelemetry-instrumentation-openai-v2 2.4b0 with
  opentelemetry-util-genai 1.1b0 (2.4b0 does not import with util-genai >= 1.2b0, which its
  unbounded requirement lets pip pick), ``OTEL_SEMCONV_STABILITY_OPT_IN=
  gen_ai_latest_experimental``, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` =
  ``SPAN_ONLY`` / ``SPAN_AND_EVENT`` / ``EVENT_ONLY``; ``_no_content``: unset. ``true``
  (with or without the opt-in) gave the same spans as unset: util-genai 1.1b0 only knows
  ``NO_CONTENT``/``SPAN_ONLY``/``EVENT_ONLY``/``SPAN_AND_EVENT`` and falls back to
  ``NO_CONTENT``. It does not instrument the Responses API, and sets no
  ``gen_ai.conversation.id``.
* ``real_openinference``: openinference-instrumentation-openai 0.1.66
  (openinference-instrumentation 0.1.72), calls inside ``using_attributes(session_id=
  "conv-walk-1", user_id="user-7")``.
* ``real_openllmetry``: opentelemetry-instrumentation-openai 0.62.4 (traceloop), default
  ``use_attributes=True``: semconv ``gen_ai.input/output.messages`` JSON strings, no longer
  the flattened ``gen_ai.prompt.N.*``; ``_events``: ``use_attributes=False`` with a logger
  provider. (It keys Responses API spans by response id: the test server gives each
  response its own id, else a second call with the same id made no span.)

* ``real_openinference_reasoning``: the same library, one more Responses API call (from a
  later run of the same capture) whose output starts with a ``reasoning`` item, as
  reasoning models' do (``real_openllmetry`` has that call too).
* ``real_traceloop_sdk``: traceloop-sdk 0.62.4 (OpenLLMetry's SDK, with its
  opentelemetry-instrumentation-openai 0.62.4 and opentelemetry-sdk 1.45.1):
  ``Traceloop.init(app_name="walk-bot", exporter=..., disable_batch=True)``, one chat call
  in an ``@workflow`` function that sets ``Associations.set([(SESSION_ID, "conv-walk-1"),
  (USER_ID, "user-7")])``.

``*_logs.json`` are the OTLP log records the event modes wrote (``otlp_logs`` topic).
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import RawRecord, TraceEvent
from evalstream.formats import decoder_for
from evalstream.formats.base import Decoded
from tests.fixtures import otlp

SYSTEM = "You are a weather assistant. Only discuss weather."

#: Span id of each call, per fixture (as the capture recorded them).
SPANS: dict[str, dict[str, str]] = {
    "real_openai_v2_span_only": {
        "plain": "a919c9449257cf8f", "system": "baaf839cf651491f",
        "multi_turn": "a17445d7e5eebe97", "tool_call": "cefafa1cde5b1479",
        "tool_result": "51ac3b77fb439dbf", "stream": "1dd2cf47b1f4fab5",
        "parts": "e8b4b99cb532cb36", "n2": "8610b0dfbdefae7f", "error": "c572648194fc9d02"},
    "real_openai_v2_span_and_event": {
        "plain": "771732723f6a074a", "system": "3bacc93ca0b02492",
        "multi_turn": "ee97332c90cafdc8", "tool_call": "0d543e8b1a33ddb0",
        "tool_result": "ed00ab7c099b1793", "stream": "872a7746762ee708",
        "parts": "e56a9e497d597729", "n2": "c3d3fe91cc15005b", "error": "0103e5c7cee098a5"},
    "real_openinference": {
        "plain": "62f9c9c0b4a810f3", "system": "45378ebc2f5c7fa5",
        "multi_turn": "201e079f0dbff08c", "tool_call": "78a1fe5c6ed98d86",
        "tool_result": "b70b8955de70a083", "stream": "fe509b0e691ea436",
        "parts": "ced713011d4631d0", "n2": "217f7cfca31eea6b", "responses": "6abb7f8935c0d599",
        "responses_list": "aa3e85699a856f6d", "responses_gap": "1c4371fda8403695",
        "error": "3f386f194489acdb"},
    "real_openllmetry": {
        "plain": "b9258a5e628c368b", "system": "3ef483da27dce06b",
        "multi_turn": "b4146324830c4811", "tool_call": "93f6f49122e3f1fa",
        "tool_result": "a52ee8ec513823ad", "stream": "086c9aa77cd927d8",
        "parts": "72001c39e7ddab8e", "n2": "a3f24b9072799549", "responses": "31208a86e89846e2",
        "responses_list": "6f5b2ab05011d0df", "responses_gap": "73532754c978228b",
        "responses_reasoning": "35d9b29c8b997395", "error": "f98a39deb71f1f33"},
}

#: (input, output, system prompt, messages) each call should give, whatever the convention.
EXPECTED: dict[str, tuple[str | None, str | None, str | None, list[tuple[str, str]]]] = {
    "plain": ("What is the weather like today?", "Answer to: What is the weather like today?",
              None, [("user", "What is the weather like today?")]),
    "system": ("Will it rain tomorrow?", "Answer to: Will it rain tomorrow?", SYSTEM,
               [("user", "Will it rain tomorrow?")]),
    "multi_turn": ("And in Oslo?", "Answer to: And in Oslo?", SYSTEM,
                   [("user", "Is it sunny in Rome?"), ("assistant", "Yes, sunny and 25C."),
                    ("user", "And in Oslo?")]),
    # A reply that is only a tool call has no answer to judge.
    "tool_call": ("Weather in Paris?", None, SYSTEM, [("user", "Weather in Paris?")]),
    # The assistant turn holding only the tool call has no text, so it is not a turn.
    "tool_result": ("Weather in Paris?", "It is 18C and cloudy in Paris.", SYSTEM,
                    [("user", "Weather in Paris?"), ("tool", '{"temp_c": 18, "sky": "cloudy"}')]),
    "stream": ("Is it windy?", "Answer to: Is it windy?", SYSTEM, [("user", "Is it windy?")]),
    # The developer message is the system prompt; the image part has no text.
    "parts": ("What does this sky say?", "Answer to: What does this sky say?", SYSTEM,
              [("user", "What does this sky say?")]),
    "n2": ("Sun or rain?", "Answer to: Sun or rain?", None, [("user", "Sun or rain?")]),
    "responses": ("Is it foggy in London?", "Answer to: Is it foggy in London?", SYSTEM,
                  [("user", "Is it foggy in London?")]),
    "responses_list": ("Hail in Bern?", "Answer to: Hail in Bern?", SYSTEM,
                       [("user", "Hail in Bern?")]),
    "responses_gap": ("And in Oslo?", "Answer to: And in Oslo?", SYSTEM,
                      [("user", "Is it sunny in Rome?"), ("user", "And in Oslo?")]),
    # The reasoning summary before the answer is not the answer.
    "responses_reasoning": ("Frost tonight?", "Answer to: Frost tonight?", SYSTEM,
                            [("user", "Frost tonight?")]),
}


def decode_both(name: str) -> Decoded:
    """``name`` decoded as otlp_json (its bytes) and as otlp_proto; both must agree."""
    decoded: dict[str, Decoded] = {}
    values = {"otlp_json": otlp.raw(name), "otlp_proto": otlp.to_proto(otlp.load(name))}
    for fmt, value in values.items():
        decoder = decoder_for(InputTopic(topic="otlp_spans", format=fmt))
        decoded[fmt] = decoder(RawRecord(topic="otlp_spans", partition=0, offset=0, value=value))
    as_json, as_proto = decoded["otlp_json"], decoded["otlp_proto"]
    assert as_json.events == as_proto.events
    assert as_json.skipped == as_proto.skipped
    return as_json


def by_call(name: str, decoded: Decoded) -> dict[str, TraceEvent]:
    call = {span_id: call for call, span_id in SPANS[name].items()}
    return {call[e.span_id]: e for e in decoded.events}


def content(event: TraceEvent) -> tuple[Any, ...]:
    return (event.input, event.output, event.system_prompt,
            [(m.role, m.content) for m in event.messages])


def expected(call: str) -> tuple[Any, ...]:
    return EXPECTED[call]


@pytest.mark.parametrize("name", ["real_openai_v2_span_only", "real_openai_v2_span_and_event",
                                  "real_openinference", "real_openllmetry"])
def test_every_captured_call_gives_its_question_answer_and_system_prompt(name: str) -> None:
    decoded = decode_both(name)
    events = by_call(name, decoded)

    # The failed call (HTTP 400) is skipped, everything else evaluated.
    assert decoded.skipped == {"error_span": 1}
    assert set(events) == set(SPANS[name]) - {"error"}
    for call, event in events.items():
        want = expected(call)
        if call == "parts" and name.startswith("real_openai_v2"):
            # openai-v2 2.4b0 writes list content as empty parts ("parts": []): only the
            # answer is on the span.
            want = (None, want[1], None, [])
        assert content(event) == want, call
        assert event.app == "walk-bot"
        assert event.event_id == f"{event.trace_id}-{event.span_id}"
        assert event.attributes["provider"] == "openai"
        assert event.attributes["environment"] == "test"
        assert (event.attributes["input_tokens"], event.attributes["output_tokens"]) == ("21", "9")


def test_openai_v2_span_attributes() -> None:
    events = by_call("real_openai_v2_span_only", decode_both("real_openai_v2_span_only"))

    assert events["plain"].session_id is None  # 2.4b0 sets no gen_ai.conversation.id
    assert events["plain"].attributes == {
        "operation": "chat", "provider": "openai", "model": "gpt-4o-mini",
        "response_model": "gpt-4o-mini-2024-07-18", "input_tokens": "21", "output_tokens": "9",
        "response_id": "chatcmpl-abc123", "finish_reasons": "stop", "environment": "test",
        "span_name": "chat gpt-4o-mini"}
    assert events["tool_call"].attributes["finish_reasons"] == "tool_calls"
    assert events["stream"].attributes["response_id"] == "chatcmpl-stream1"
    assert events["n2"].attributes["finish_reasons"] == "stop,stop"


def test_span_and_event_spans_decode_as_span_only() -> None:
    # SPAN_AND_EVENT writes the same span attributes as SPAN_ONLY (and also log records).
    span_only = by_call("real_openai_v2_span_only", decode_both("real_openai_v2_span_only"))
    both = by_call("real_openai_v2_span_and_event", decode_both("real_openai_v2_span_and_event"))

    assert {c: content(e) for c, e in both.items()} == {
        c: content(e) for c, e in span_only.items()}


def test_openinference_session_user_and_model() -> None:
    events = by_call("real_openinference", decode_both("real_openinference"))

    for event in events.values():
        assert event.session_id == "conv-walk-1"  # session.id from using_attributes
        assert event.attributes["user_id"] == "user-7"
        assert event.attributes["operation"] == "llm"
        # OpenInference's llm.model_name is overwritten with the response's model; it has no
        # request model of its own (that is in llm.invocation_parameters).
        assert event.attributes["model"] == "gpt-4o-mini-2024-07-18"
    assert events["plain"].attributes["span_name"] == "ChatCompletion"
    assert events["responses"].attributes["span_name"] == "Response"


def test_openinference_responses_input_numbered_past_a_gap_keeps_the_last_question() -> None:
    # openinference-instrumentation-openai numbers Responses API input items from 1 (0 is
    # for `instructions`) and writes nothing for an item_reference: this span lists
    # messages 0 (instructions), 1 and 3. Reading up to the first gap took the earlier
    # question ("Is it sunny in Rome?") as the one answered. Checked failing without the fix.
    events = by_call("real_openinference", decode_both("real_openinference"))

    assert content(events["responses_gap"]) == expected("responses_gap")
    # Without instructions the list starts at 1: the system message was lost.
    assert events["responses_list"].system_prompt == SYSTEM


def test_openinference_reasoning_summary_is_not_the_answer() -> None:
    # OpenInference lists the reasoning item as an output message whose content part has
    # type "reasoning"; its text was taken as the answer. Checked failing without the fix.
    decoded = decode_both("real_openinference_reasoning")

    [event] = decoded.events
    assert event.output == "Answer to: Frost tonight?"
    assert (event.input, event.system_prompt) == ("Frost tonight?", SYSTEM)


def test_openllmetry_attributes() -> None:
    events = by_call("real_openllmetry", decode_both("real_openllmetry"))

    assert events["plain"].session_id is None  # association properties need traceloop-sdk
    assert events["plain"].attributes == {
        "operation": "chat", "provider": "openai", "model": "gpt-4o-mini",
        "response_model": "gpt-4o-mini-2024-07-18", "input_tokens": "21", "output_tokens": "9",
        "response_id": "chatcmpl-abc123", "finish_reasons": "stop", "environment": "test",
        "span_name": "openai.chat"}
    # OpenLLMetry maps OpenAI's "tool_calls" to the semconv "tool_call".
    assert events["tool_call"].attributes["finish_reasons"] == "tool_call"
    assert events["responses"].attributes["span_name"] == "openai.response"
    assert events["responses"].attributes["response_id"] == "resp_1"
    assert events["responses_reasoning"].attributes["model"] == "o4-mini"


def test_traceloop_sdk_session_and_user_association_properties() -> None:
    # The SDK's standard AssociationProperty.SESSION_ID / USER_ID become
    # traceloop.association.properties.session_id / user_id on every span of the context:
    # without reading them, OpenLLMetry conversations had no session (and session routes
    # evaluated each turn alone). Checked failing without the fix.
    decoded = decode_both("real_traceloop_sdk")

    assert decoded.skipped == {"not_llm": 1}  # the @workflow span
    [event] = decoded.events
    assert event.span_id == "54953e45dd902461"
    assert event.session_id == "conv-walk-1"
    assert event.attributes["user_id"] == "user-7"
    assert event.app == "walk-bot"
    assert content(event) == expected("system")


@pytest.mark.parametrize("name", ["real_openai_v2_no_content", "real_openai_v2_event_only"])
def test_openai_v2_without_span_content_is_skipped_as_no_content(name: str) -> None:
    # Capture off (unset, or `true`), or content sent to the logs signal only (EVENT_ONLY):
    # the spans carry model and tokens but no text.
    decoded = decode_both(name)

    assert decoded.events == []
    assert decoded.skipped == {"no_content": 8, "error_span": 1}


def test_openllmetry_events_mode_keeps_only_responses_content_on_spans() -> None:
    # use_attributes=False sends chat content to log records; the Responses API wrapper
    # still writes gen_ai.input/output.messages on its span.
    decoded = decode_both("real_openllmetry_events")

    assert decoded.skipped == {"no_content": 8, "error_span": 1}
    [event] = decoded.events
    assert event.span_id == "74b451e80af747b8"
    assert content(event) == expected("responses")


def _logs_to_proto(doc: dict[str, Any]) -> bytes:
    doc = copy.deepcopy(doc)
    for rl in doc["resourceLogs"]:
        for sl in rl["scopeLogs"]:
            for record in sl["logRecords"]:
                for key in ("traceId", "spanId"):
                    if record.get(key):
                        record[key] = base64.b64encode(bytes.fromhex(record[key])).decode()
    data: bytes = json_format.ParseDict(doc, LogsData()).SerializeToString()
    return data


@pytest.mark.parametrize(("name", "records", "unparented", "event_names"), [
    ("real_openai_v2_event_only_logs", 9, 0, {"gen_ai.client.inference.operation.details"}),
    # OpenLLMetry 0.62.4 writes a streamed answer's gen_ai.choice outside the span's
    # context: without trace or span id, it cannot even be joined to its span.
    ("real_openllmetry_events_logs", 28, 1, {"gen_ai.system.message", "gen_ai.user.message",
                                             "gen_ai.assistant.message", "gen_ai.tool.message",
                                             "gen_ai.choice"}),
])
def test_content_in_log_records_is_not_read(name: str, records: int, unparented: int,
                                            event_names: set[str]) -> None:
    """The event modes' content is in OTLP log records (``otlp_logs``), which the trace
    formats do not decode: a logs message on an OTLP traces input is not a trace batch
    (``otlp_logs_json`` / ``otlp_logs_proto`` read them: test_formats_otlp_logs)."""
    doc = otlp.load(name)
    found = [r for rl in doc["resourceLogs"] for sl in rl["scopeLogs"] for r in sl["logRecords"]]
    assert len(found) == records
    assert {r["eventName"] for r in found} == event_names
    assert sum("spanId" not in r for r in found) == unparented  # others: the chat span's

    json_decoder = decoder_for(InputTopic(topic="otlp_logs", format="otlp_json"))
    with pytest.raises(DecodeError) as raised:
        json_decoder(RawRecord(topic="otlp_logs", partition=0, offset=0,
                               value=orjson.dumps(doc)))
    assert raised.value.reason == "not_otlp"
    proto_decoder = decoder_for(InputTopic(topic="otlp_logs", format="otlp_proto"))
    try:
        decoded = proto_decoder(RawRecord(topic="otlp_logs", partition=0, offset=0,
                                          value=_logs_to_proto(doc)))
    except DecodeError:
        pass  # dead-lettered (these do not parse as TracesData)
    else:
        assert decoded.events == []
