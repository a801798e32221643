"""otlp_proto decoding of bytes made by the real OpenTelemetry SDK and OTLP exporter encoder,
and parity with otlp_json on the hand-written fixtures."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.events import Message, RawRecord
from evalstream.formats import decoder_for
from evalstream.formats.base import Decoded
from tests.fixtures import otlp


def decode(value: bytes | None, fmt: str = "otlp_proto", **topic: Any) -> Decoded:
    decoder = decoder_for(InputTopic(topic="spans", format=fmt, **topic))  # type: ignore[arg-type]
    return decoder(RawRecord(topic="spans", partition=0, offset=0, value=value))


@pytest.fixture
def sdk() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(
        {"service.name": "support-bot", "deployment.environment.name": "staging"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("opentelemetry.instrumentation.genai.test"), exporter
    provider.shutdown()


def encode(spans: Sequence[ReadableSpan]) -> bytes:
    """What the OTLP exporter (and the Collector's otlp_proto Kafka encoding) sends."""
    data: bytes = encode_spans(spans).SerializeToString()
    return data


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def parts(role: str, text: str, **extra: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}], **extra}


def make_agent_trace(tracer: Tracer) -> None:
    """One request of an instrumented app: an agent span around retrieval, a tool call and
    chat calls in the styles different instrumentations emit."""
    with tracer.start_as_current_span("invoke_agent billing", kind=SpanKind.INTERNAL) as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        agent.set_attribute("gen_ai.agent.name", "billing")
        with tracer.start_as_current_span("retrieve", kind=SpanKind.CLIENT) as retrieval:
            retrieval.set_attribute("openinference.span.kind", "RETRIEVER")
            retrieval.set_attribute("retrieval.documents.0.document.content",
                                    "Holds are released within 3 days.")
        with tracer.start_as_current_span("execute_tool lookup_invoice") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "lookup_invoice")
        # semconv 1.37+ with content captured as JSON strings (opentelemetry-util-genai).
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.provider.name", "openai")
            chat.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            chat.set_attribute("gen_ai.conversation.id", "conv-1")
            chat.set_attribute("gen_ai.usage.input_tokens", 42)
            chat.set_attribute("gen_ai.usage.output_tokens", 7)
            chat.set_attribute("gen_ai.response.finish_reasons", ["stop"])
            chat.set_attribute("gen_ai.system_instructions", json.dumps(
                [{"type": "text", "content": "You handle billing questions only."}]))
            chat.set_attribute("gen_ai.input.messages", json.dumps([
                parts("user", "I was charged twice."),
                parts("assistant", "Let me check."),
                parts("user", "Please refund one."),
            ]))
            chat.set_attribute("gen_ai.output.messages", json.dumps(
                [parts("assistant", "I can't issue refunds, but the hold will drop off.",
                       finish_reason="stop")]))
        # The same kind of call with content capture off (the default).
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as bare:
            bare.set_attribute("gen_ai.operation.name", "chat")
            bare.set_attribute("gen_ai.provider.name", "openai")
            bare.set_attribute("gen_ai.usage.input_tokens", 40)


def test_sdk_encoded_batch_decodes_to_events_and_skips(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk
    make_agent_trace(tracer)
    spans = exporter.get_finished_spans()
    assert len(spans) == 5

    decoded = decode(encode(spans))

    # agent, retriever and tool spans are not model calls; one chat span has no content.
    assert decoded.skipped == {"not_llm": 3, "no_content": 1}
    [event] = decoded.events
    chat = next(s for s in spans if s.attributes and "gen_ai.input.messages" in s.attributes)
    trace_id, span_id = hex_ids(chat)
    assert (event.trace_id, event.span_id) == (trace_id, span_id)
    assert event.event_id == f"{trace_id}-{span_id}"
    assert event.app == "support-bot"
    assert event.session_id == "conv-1"
    assert event.system_prompt == "You handle billing questions only."
    assert event.messages == (
        Message(role="user", content="I was charged twice."),
        Message(role="assistant", content="Let me check."),
        Message(role="user", content="Please refund one."),
    )
    assert event.input == "Please refund one."
    assert event.output == "I can't issue refunds, but the hold will drop off."
    assert event.context == ("Holds are released within 3 days.",)
    assert event.attributes == {
        "operation": "chat",
        "provider": "openai",
        "model": "gpt-4o-mini",
        "input_tokens": "42",
        "output_tokens": "7",
        "finish_reasons": "stop",
        "environment": "staging",
        "span_name": "chat gpt-4o-mini",
    }
    assert chat.end_time is not None
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert event.timestamp == epoch + timedelta(microseconds=chat.end_time // 1000)


def test_sdk_legacy_openinference_and_span_event_styles(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk
    with tracer.start_as_current_span("openai.chat") as legacy:
        legacy.set_attribute("gen_ai.system", "openai")
        legacy.set_attribute("llm.request.type", "chat")
        legacy.set_attribute("gen_ai.prompt.0.role", "system")
        legacy.set_attribute("gen_ai.prompt.0.content", "Be brief.")
        legacy.set_attribute("gen_ai.prompt.1.role", "user")
        legacy.set_attribute("gen_ai.prompt.1.content", "Hi")
        legacy.set_attribute("gen_ai.completion.0.role", "assistant")
        legacy.set_attribute("gen_ai.completion.0.content", "Hello.")
        legacy.set_attribute("gen_ai.completion.0.finish_reason", "stop")
    with tracer.start_as_current_span("ChatCompletion") as oi:
        oi.set_attribute("openinference.span.kind", "LLM")
        oi.set_attribute("llm.model_name", "gpt-4o")
        oi.set_attribute("session.id", "s-9")
        oi.set_attribute("llm.input_messages.0.message.role", "user")
        oi.set_attribute("llm.input_messages.0.message.content", "Tell me a joke")
        oi.set_attribute("llm.output_messages.0.message.role", "assistant")
        oi.set_attribute("llm.output_messages.0.message.content", "I'd rather not.")
    with tracer.start_as_current_span("chat gpt-3.5-turbo") as old:
        old.set_attribute("gen_ai.system", "openai")
        old.set_attribute("gen_ai.request.model", "gpt-3.5-turbo")
        old.add_event("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps(
            [{"role": "user", "content": "2+2?"}])})
        old.add_event("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
            [{"role": "assistant", "content": "4"}])})
    spans = exporter.get_finished_spans()

    decoded = decode(encode(spans))

    assert decoded.skipped == {}
    by_name = {e.attributes["span_name"]: e for e in decoded.events}
    assert by_name["openai.chat"].system_prompt == "Be brief."
    assert by_name["openai.chat"].input == "Hi"
    assert by_name["openai.chat"].output == "Hello."
    assert by_name["openai.chat"].attributes["finish_reasons"] == "stop"
    assert by_name["ChatCompletion"].session_id == "s-9"
    assert by_name["ChatCompletion"].output == "I'd rather not."
    assert by_name["ChatCompletion"].attributes["model"] == "gpt-4o"
    assert by_name["chat gpt-3.5-turbo"].input == "2+2?"
    assert by_name["chat gpt-3.5-turbo"].output == "4"


def test_reexported_spans_get_the_same_event_ids(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk
    make_agent_trace(tracer)
    spans = exporter.get_finished_spans()
    # A retrying exporter may resend a span in a differently composed batch.
    first = decode(encode(spans)).events
    again = decode(encode(list(reversed(spans)))).events
    assert [e.event_id for e in first] == [e.event_id for e in again]
    assert first == again


def test_traces_data_and_export_request_are_both_read(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk
    make_agent_trace(tracer)
    request = encode_spans(exporter.get_finished_spans())
    assert isinstance(request, ExportTraceServiceRequest)
    as_traces_data = TracesData(resource_spans=request.resource_spans).SerializeToString()
    assert decode(as_traces_data) == decode(request.SerializeToString())


@pytest.mark.parametrize("name", ["semconv_json_strings", "semconv_structured",
                                  "legacy_openllmetry", "openinference", "span_events"])
def test_proto_and_json_decoders_agree_on_the_fixtures(name: str) -> None:
    from_json = decode(otlp.raw(name), "otlp_json")
    from_proto = decode(otlp.to_proto(otlp.load(name)))
    assert from_json.events, "fixture must produce events"
    assert from_proto == from_json


def test_a_span_with_bad_ids_is_skipped_and_its_batch_kept() -> None:
    data = TracesData()
    data.ParseFromString(otlp.to_proto(otlp.load("semconv_json_strings")))
    spans = data.resource_spans[0].scope_spans[0].spans
    broken = spans.add()
    broken.CopyFrom(spans[0])
    broken.trace_id = b"\x01\x02\x03"  # not 16 bytes

    decoded = decode(data.SerializeToString())

    assert decoded.skipped == {"bad_span": 1}
    assert [e.span_id for e in decoded.events] == ["00f067aa0ba902b7"]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xff\xff\xff\xff", "invalid_protobuf"),
        (b'{"resourceSpans": []}', "invalid_protobuf"),
        # Parse as protobuf made only of unknown fields (here another message's field 2
        # varint, and field 1 with the wrong wire type): still not a trace batch.
        (b"\x10\x01", "not_otlp"),
        (b"\x08\x96\x01", "not_otlp"),
        (None, "empty_message"),
    ],
)
def test_messages_that_are_not_otlp_protobuf_are_dead_lettered(value: bytes | None,
                                                               reason: str) -> None:
    with pytest.raises(DecodeError) as err:
        decode(value)
    assert err.value.reason == reason


def test_an_empty_batch_is_counted() -> None:
    assert decode(b"").skipped == {"empty_batch": 1}
    assert decode(TracesData(resource_spans=[{}]).SerializeToString()).skipped == {
        "empty_batch": 1}


def test_failed_chat_spans_are_skipped_as_error_spans(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    from opentelemetry.trace import Status, StatusCode

    tracer, exporter = sdk
    for status in (StatusCode.ERROR, StatusCode.OK, StatusCode.UNSET):
        with tracer.start_as_current_span("chat gpt-4o") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.input.messages", json.dumps([parts("user", "Q?")]))
            # A stream cut by the error: partial text that must not be judged.
            span.set_attribute("gen_ai.output.messages",
                               json.dumps([parts("assistant", "The ans")]))
            span.set_status(Status(status))
    decoded = decode(encode(exporter.get_finished_spans()))
    assert len(decoded.events) == 2
    assert decoded.skipped == {"error_span": 1}


def test_a_chat_span_around_the_same_call_is_a_duplicate(
        sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk

    # LangChain's span, then the OpenAI SDK's span of the same call, nested.
    with (tracer.start_as_current_span("ChatOpenAI") as outer,
          tracer.start_as_current_span("ChatCompletion") as inner):
        for span in (outer, inner):
            span.set_attribute("openinference.span.kind", "LLM")
            span.set_attribute("input.value", "hi")
            span.set_attribute("output.value", "hello")
    decoded = decode(encode(exporter.get_finished_spans()))
    assert [e.attributes["span_name"] for e in decoded.events] == ["ChatCompletion"]
    assert decoded.skipped == {"duplicate_span": 1}
