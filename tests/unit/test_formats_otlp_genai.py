"""Span -> TraceEvent rules shared by both OTLP decoders, on small spans built in code."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from evalstream.config import InputTopic
from evalstream.formats import otlp_json
from evalstream.formats.base import Decoded
from evalstream.formats.genai import Options
from evalstream.formats.genai_messages import parts_text

TRACE = "0af7651916cd43dd8448eb211c80319c"


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def span(span_id: str, attrs: list[dict[str, Any]], *, trace: str = TRACE, end: int = 2_000,
         events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span_id, "name": "s", "startTimeUnixNano": "1000",
            "endTimeUnixNano": str(end), "attributes": attrs, "events": events or []}


def decode(*spans: dict[str, Any], resource: list[dict[str, Any]] | None = None,
           **topic: Any) -> Decoded:
    doc = {"resourceSpans": [{"resource": {"attributes": resource or []},
                              "scopeSpans": [{"spans": list(spans)}]}]}
    options = Options.from_topic(InputTopic(topic="t", format="otlp_json", **topic))
    return otlp_json.decode(orjson.dumps(doc), options)


def chat(span_id: str, user: str = "hi", answer: str = "hello", **kw: Any) -> dict[str, Any]:
    return span(span_id, [
        kv("gen_ai.operation.name", "chat"),
        kv("gen_ai.input.messages", json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": user}]}])),
        kv("gen_ai.output.messages", json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}])),
    ], **kw)


def retrieval(span_id: str, doc: str, **kw: Any) -> dict[str, Any]:
    return span(span_id, [kv("openinference.span.kind", "RETRIEVER"),
                          kv("retrieval.documents.0.document.content", doc)], **kw)


def test_context_comes_only_from_earlier_retrievals_of_the_same_trace() -> None:
    decoded = decode(
        retrieval("1000000000000001", "before", end=1_500),
        retrieval("1000000000000002", "after", end=9_000),
        retrieval("1000000000000003", "other trace", trace="f" * 32, end=1_500),
        chat("2000000000000001", end=2_000),
    )
    assert [e.context for e in decoded.events] == [("before",)]
    assert decoded.skipped == {"not_llm": 3}


def test_span_app_attribute_beats_the_resource() -> None:
    resource = [kv("service.name", "svc"), kv("app.name", "from-resource")]
    on_span = chat("2000000000000001")
    on_span["attributes"].append(kv("app.name", "from-span"))
    decoded = decode(on_span, chat("2000000000000002"), resource=resource,
                     app_attribute="app.name")
    assert [e.app for e in decoded.events] == ["from-span", "from-resource"]
    assert decode(chat("2000000000000003"), resource=resource).events[0].app == "svc"


def test_agent_spans_are_evaluated_when_configured() -> None:
    agent = chat("3000000000000001")
    agent["attributes"][0] = kv("gen_ai.operation.name", "invoke_agent")
    assert decode(agent).skipped == {"not_llm": 1}
    decoded = decode(agent, llm_operations=["chat", "invoke_agent"])
    assert decoded.events[0].attributes["operation"] == "invoke_agent"


def test_input_without_output_is_kept_and_nothing_at_all_is_no_content() -> None:
    only_input = span("4000000000000001", [
        kv("gen_ai.operation.name", "text_completion"),
        kv("gen_ai.input.messages", '[{"role": "user", "parts": [{"type": "text", '
                                    '"content": "Once upon a time"}]}]')])
    only_system = span("4000000000000002", [
        kv("gen_ai.operation.name", "chat"),
        kv("gen_ai.system_instructions", "You are terse.")])
    empty_lists = span("4000000000000003", [
        kv("gen_ai.operation.name", "chat"), kv("gen_ai.input.messages", "[]"),
        kv("gen_ai.output.messages", "[]")])
    decoded = decode(only_input, only_system, empty_lists)
    [event] = decoded.events
    assert event.input == "Once upon a time"
    assert event.output is None
    assert decoded.skipped == {"no_content": 2}


def test_plain_string_system_instructions_and_system_messages_merge() -> None:
    s = chat("5000000000000001")
    s["attributes"] += [
        kv("gen_ai.system_instructions", "Be kind."),
    ]
    s["attributes"][1] = kv("gen_ai.input.messages", json.dumps([
        {"role": "system", "parts": [{"type": "text", "content": "Answer in French."}]},
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}]))
    [event] = decode(s).events
    assert event.system_prompt == "Be kind.\n\nAnswer in French."
    assert [m.role for m in event.messages] == ["user"]


def test_openai_choices_in_old_completion_events() -> None:
    s = span("6000000000000001", [kv("gen_ai.system", "openai")], events=[
        {"name": "gen_ai.content.prompt", "attributes": [kv("gen_ai.prompt", json.dumps(
            [{"role": "user", "content": [{"type": "text", "text": "Name a colour"}]}]))]},
        {"name": "gen_ai.content.completion", "attributes": [kv("gen_ai.completion", json.dumps(
            [{"index": 0, "finish_reason": "length",
              "message": {"role": "assistant", "content": "Blue"}}]))]},
    ])
    [event] = decode(s).events
    assert (event.input, event.output) == ("Name a colour", "Blue")
    assert event.attributes["finish_reasons"] == "length"


def test_legacy_and_openinference_without_kind_markers_are_still_model_calls() -> None:
    legacy = span("7000000000000001", [kv("gen_ai.prompt.0.content", "Q?"),
                                       kv("gen_ai.completion.0.content", "A.")])
    oi = span("7000000000000002", [kv("llm.input_messages.0.message.role", "user"),
                                   kv("llm.input_messages.0.message.content", "Q2?")])
    plain = span("7000000000000003", [kv("db.system", "postgresql")])
    decoded = decode(legacy, oi, plain)
    assert [(e.input, e.output) for e in decoded.events] == [("Q?", "A."), ("Q2?", None)]
    assert decoded.skipped == {"not_genai": 1}


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        ([{"type": "text", "content": "a"}, {"type": "text", "content": "b"}], "a\nb"),
        ([{"type": "tool_call_response", "id": "1", "result": {"temp": 14}}], '{"temp":14}'),
        ([{"type": "tool_call", "name": "f", "arguments": {}}], ""),
        ([{"type": "blob", "modality": "image", "content": "AAAA"}], ""),
        ([{"type": "reasoning", "content": "hmm"}, {"type": "output_text", "text": "ok"}], "ok"),
        (["bare string part"], "bare string part"),
        ("already text", "already text"),
        (None, ""),
    ],
)
def test_parts_text(parts: Any, text: str) -> None:
    assert parts_text(parts) == text


def test_token_and_finish_attributes_are_flat_strings() -> None:
    s = chat("8000000000000001")
    s["attributes"] += [
        kv("gen_ai.usage.input_tokens", 12),
        {"key": "gen_ai.response.finish_reasons", "value": {"arrayValue": {"values": [
            {"stringValue": "stop"}, {"stringValue": "length"}]}}},
        {"key": "gen_ai.request.model", "value": {"boolValue": True}},
    ]
    [event] = decode(s).events
    assert event.attributes["input_tokens"] == "12"
    assert event.attributes["finish_reasons"] == "stop,length"
    assert event.attributes["model"] == "true"


def test_legacy_content_that_merely_looks_like_json_is_kept() -> None:
    typed = '[{"type": "text", "text": "Describe this"}, {"type": "image_url", "image_url": {}}]'
    user_json = '[{"id": 1, "qty": 2}]'
    only_image = '[{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]'
    decoded = decode(*[
        span(f"900000000000000{i}", [kv("llm.request.type", "chat"),
                                     kv("gen_ai.prompt.0.role", "user"),
                                     kv("gen_ai.prompt.0.content", content)])
        for i, content in enumerate([typed, user_json, only_image])])
    assert [e.input for e in decoded.events] == ["Describe this", user_json]
    assert decoded.skipped == {"no_content": 1}  # an image alone has no text to judge
