"""otlp_json decoding of hand-written fixtures: semconv (JSON strings, structured, span events),
legacy OpenLLMetry and OpenInference spans, plus malformed input."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import Message, RawRecord, TraceEvent
from evalstream.formats import decoder_for
from evalstream.formats.base import Decoded
from tests.fixtures import otlp


def decode(value: bytes | None, **topic: Any) -> Decoded:
    decoder = decoder_for(InputTopic(topic="spans", format="otlp_json", **topic))
    return decoder(RawRecord(topic="spans", partition=0, offset=7, value=value))


def by_span(decoded: Decoded) -> dict[str, TraceEvent]:
    return {e.span_id: e for e in decoded.events}


def test_semconv_json_string_messages_give_the_full_event() -> None:
    decoded = decode(otlp.raw("semconv_json_strings"))

    assert decoded.skipped == {}
    [event] = decoded.events
    assert event == TraceEvent(
        event_id="4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="00f067aa0ba902b7",
        session_id="conv-8812",
        app="support-bot",
        system_prompt="You are a billing assistant. Only discuss billing.",
        messages=(Message(role="user", content="Why was I charged twice?"),),
        input="Why was I charged twice?",
        output="One is a pending hold.",
        attributes={
            "operation": "chat",
            "provider": "openai",
            "model": "gpt-4o-mini",
            "response_model": "gpt-4o-mini-2024-07-18",
            "response_id": "chatcmpl-123",
            "input_tokens": "42",
            "output_tokens": "17",
            "finish_reasons": "stop",
            "environment": "prod",
            "span_name": "chat gpt-4o-mini",
        },
        timestamp=datetime(2025, 10, 9, 8, 53, 21, 250000, tzinfo=UTC),
    )
    assert event.timestamp == datetime.fromtimestamp(1760000001.25, UTC)


def test_structured_messages_mixed_batch_and_retrieval_context() -> None:
    decoded = decode(otlp.raw("semconv_structured"))

    # retrieval + execute_tool + embeddings are GenAI but not model calls; the chat span
    # without captured content and the HTTP span are counted too.
    assert decoded.skipped == {"not_llm": 3, "no_content": 1, "not_genai": 1}
    [event] = decoded.events
    assert event.trace_id == "5b8efff798038103d269b633813fc60c"
    assert event.span_id == "b7ad6b7169203331"
    assert event.app == "travel-agent"
    assert event.session_id == "thread-77"
    assert event.system_prompt == "You plan trips. Never book without consent."
    # The assistant turn that only called a tool has no text; the tool result is kept.
    assert event.messages == (
        Message(role="user", content="What is the weather in Lisbon?"),
        Message(role="tool", content="rainy, 14C"),
        Message(role="user", content="And should I fly there tomorrow?"),
    )
    assert event.input == "And should I fly there tomorrow?"
    # Reasoning parts are not the answer the user saw.
    assert event.output == "Expect rain; the 09:00 flight is a good option."
    # From the retrieval span of the same trace (its ids were upper-case hex).
    assert event.context == ("Flights to Lisbon leave daily at 09:00.", "Checked bags cost 30 EUR.")
    assert event.attributes["agent_name"] == "Trip planner"
    assert event.attributes["user_id"] == "u-42"
    assert event.attributes["provider"] == "azure.ai.openai"
    assert event.attributes["finish_reasons"] == "stop"
    assert event.attributes["input_tokens"] == "310"


def test_legacy_openllmetry_flattened_attributes() -> None:
    decoded = decode(otlp.raw("legacy_openllmetry"),
                     session_attribute="traceloop.association.properties.session_id")

    assert decoded.skipped == {"not_llm": 1}  # the traceloop workflow span
    events = by_span(decoded)
    first = events["00f067aa0ba902b7"]
    assert first.system_prompt == "You are a billing assistant. Only discuss billing."
    assert first.messages == (Message(role="user", content="Why was I charged twice?"),)
    assert first.input == "Why was I charged twice?"
    assert first.output == "One is a pending hold."
    assert first.session_id == "s-991"
    assert first.app == "support-bot"
    assert first.attributes == {
        "operation": "chat",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_tokens": "42",
        "output_tokens": "17",
        "finish_reasons": "stop",
        "span_name": "openai.chat",
    }
    # Multimodal content arrives as a JSON list of OpenAI parts: only the text is kept.
    second = events["10f067aa0ba902b8"]
    assert second.input == "What is in this picture?"
    assert second.output == "A receipt."
    assert second.session_id is None


def test_openinference_messages_values_and_retriever_context() -> None:
    decoded = decode(otlp.raw("openinference"))

    assert decoded.skipped == {"not_llm": 2}  # RETRIEVER and CHAIN
    events = by_span(decoded)
    llm = events["00f067aa0ba902b7"]
    assert llm.system_prompt == "You are a billing assistant. Only discuss billing."
    # The user turn is in contents.K.message_content.text; the image part has no text.
    assert llm.messages == (Message(role="user", content="Why was I charged twice?"),)
    assert llm.input == "Why was I charged twice?"
    assert llm.output == "One is a pending hold."
    assert llm.session_id == "conv-8812"
    assert llm.context == ("Card payments show a pending hold for up to 3 days.",
                           "Refunds take 5-10 business days.")
    assert llm.attributes == {
        "operation": "llm",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_tokens": "42",
        "output_tokens": "17",
        "user_id": "u-193",
        "span_name": "ChatCompletion",
    }
    # Only input.value / output.value: plain text input, JSON (OpenAI response) output.
    values_only = events["c0f067aa0ba902b3"]
    assert values_only.input == "Can you refund the hold?"
    assert values_only.messages == (Message(role="user", content="Can you refund the hold?"),)
    assert values_only.output == "I cannot refund a hold; it expires on its own."


def test_span_event_forms_old_and_new() -> None:
    decoded = decode(otlp.raw("span_events"))

    assert decoded.skipped == {}
    events = by_span(decoded)
    old = events["2222222222222222"]  # semconv <= 1.27 gen_ai.content.prompt/completion
    assert old.system_prompt == "You are terse."
    assert old.input == "Capital of France?"
    assert old.output == "Paris."
    assert old.attributes["input_tokens"] == "20"
    assert old.attributes["output_tokens"] == "9"
    assert old.attributes["provider"] == "openai"
    assert "operation" not in old.attributes
    new = events["4444444444444444"]  # gen_ai.client.inference.operation.details
    assert new.system_prompt == "You are a cooking assistant."
    assert new.input == "How long do I boil an egg?"
    assert new.output == "About 9 minutes for hard-boiled."
    assert new.attributes["finish_reasons"] == "stop"


def test_bad_spans_are_counted_and_good_ones_kept() -> None:
    decoded = decode(otlp.raw("bad_spans"))

    # base64 ids (a json_format export), truncated message JSON, a non-object span.
    assert decoded.skipped == {"bad_span": 3}
    [event] = decoded.events
    assert event.span_id == "00f067aa0ba902c2"
    assert event.output == "Hi! How can I help?"


def test_event_ids_are_stable_across_decodes() -> None:
    first = decode(otlp.raw("semconv_structured")).events
    again = decode(otlp.raw("semconv_structured")).events
    assert [e.event_id for e in first] == [e.event_id for e in again]
    assert first[0].event_id == "5b8efff798038103d269b633813fc60c-b7ad6b7169203331"


def test_configured_app_session_operations_and_attribute_map() -> None:
    decoded = decode(
        otlp.raw("semconv_structured"),
        app_attribute="team",
        llm_operations=["chat", "execute_tool"],
        attribute_map={"tool": "gen_ai.tool.name", "service": "service.name"},
    )
    events = by_span(decoded)
    assert events["b7ad6b7169203331"].app == "growth"
    assert events["b7ad6b7169203331"].attributes["service"] == "travel-agent"
    # execute_tool is now evaluated but carries no chat content.
    assert decoded.skipped == {"not_llm": 2, "no_content": 2, "not_genai": 1}


def test_gen_ai_conversation_id_wins_over_session_id_and_configured_wins_over_both() -> None:
    doc = otlp.load("semconv_json_strings")
    attrs = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]
    attrs.append({"key": "session.id", "value": {"stringValue": "oi-session"}})
    attrs.append({"key": "app.thread", "value": {"stringValue": "mine"}})
    value = orjson.dumps(doc)
    assert decode(value).events[0].session_id == "conv-8812"
    assert decode(value, session_attribute="app.thread").events[0].session_id == "mine"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "invalid_json"),
        (b"\xff\xfe", "invalid_json"),
        (b"[1, 2]", "not_otlp"),
        (b'"resourceSpans"', "not_otlp"),
        (b'{"resourceSpans": "nope"}', "not_otlp"),
        # A flat_json event sent to an otlp_json topic must not pass as an empty batch.
        (b'{"trace_id": "abc", "input": "hi", "output": "hello"}', "not_otlp"),
        (None, "empty_message"),
    ],
)
def test_messages_that_are_not_otlp_json_are_dead_lettered(value: bytes | None,
                                                            reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode(value)
    assert err.value.reason == reason


def test_empty_batches_are_counted_not_dead_lettered() -> None:
    assert decode(b"{}").skipped == {"empty_batch": 1}
    assert decode(b'{"resourceSpans": []}').skipped == {"empty_batch": 1}
    assert decode(b'{"resourceSpans": [{"scopeSpans": [{"spans": []}]}]}').skipped == {
        "empty_batch": 1}


def test_a_malformed_resource_costs_only_its_spans() -> None:
    good = otlp.load("semconv_json_strings")["resourceSpans"][0]
    bad = {"resource": {"attributes": [{"value": {"stringValue": "no key"}}]},
           "scopeSpans": [{"spans": [{}, {}]}]}
    decoded = decode(orjson.dumps({"resourceSpans": [bad, good]}))
    assert decoded.skipped == {"bad_span": 2}
    assert len(decoded.events) == 1


def test_int_and_double_values_accept_strings_and_numbers() -> None:
    from evalstream.formats.otlp_json import any_value

    assert any_value({"intValue": "9007199254740993"}) == 9007199254740993
    assert any_value({"intValue": 5}) == 5
    assert any_value({"doubleValue": "NaN"}) != any_value({"doubleValue": "NaN"})
    assert any_value({"doubleValue": 0.5}) == 0.5
    assert any_value({"boolValue": True}) is True
    assert any_value({"bytesValue": "AAEC"}) == "000102"
    assert any_value({}) is None
    assert any_value({"kvlistValue": {"values": [{"key": "a", "value": {"arrayValue": {
        "values": [{"stringValue": "x"}, {"intValue": "1"}]}}}]}}) == {"a": ["x", 1]}


@pytest.mark.parametrize("bad", [
    "5b8efff7 8038103d269b633813fc 60",  # bytes.fromhex skips the whitespace
    "5b8efff798038103d269b633813f\t\n60",
    "+b8efff798038103d269b633813fc60c",
    "5b8efff798038103d269b633813fc6\u0660c",
])
def test_a_trace_id_that_is_not_32_hex_digits_is_a_bad_span(bad: str) -> None:
    doc = otlp.load("semconv_json_strings")
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(bad) == len(span["traceId"]) == 32
    span["traceId"] = bad
    assert decode(orjson.dumps(doc)).skipped == {"bad_span": 1}
    span["traceId"] = "".join(c if c in "0123456789abcdef" else "0" for c in bad).upper()
    assert decode(orjson.dumps(doc)).events[0].trace_id == span["traceId"].lower()
