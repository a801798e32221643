"""The worker on ``otlp_proto`` batches made by the real OpenTelemetry SDK + OTLP encoder:
chat spans with content become refusal results, other spans are counted skips by reason,
and messages that are not OTLP are dead-lettered byte for byte. Real broker, builtin judge."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import dump_json
from tests.integration.workerkit import (
    Topics,
    committed,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

PARTITIONS = 2
BATCHES = 6
REFUSAL = "I'm sorry, but I can't help with that request."
ANSWER = "Sure: open Settings, choose Billing, then Download invoice."


@pytest.fixture
def sdk() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("opentelemetry.instrumentation.genai.test"), exporter
    provider.shutdown()


def _messages(*turns: tuple[str, str]) -> str:
    return json.dumps([{"role": r, "parts": [{"type": "text", "content": t}]} for r, t in turns])


def request_spans(tracer: Tracer, batch: int) -> None:
    """One app request: retrieval, a tool call, a chat call without captured content, and
    two chat calls with content (semconv JSON strings; OpenLLMetry flattened)."""
    with tracer.start_as_current_span("invoke_agent support") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("retrieval kb", kind=SpanKind.CLIENT) as retrieval:
            retrieval.set_attribute("gen_ai.operation.name", "retrieval")
        with tracer.start_as_current_span("execute_tool find_invoice") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as bare:
            bare.set_attribute("gen_ai.operation.name", "chat")
            bare.set_attribute("gen_ai.provider.name", "openai")
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.provider.name", "openai")
            chat.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            chat.set_attribute("gen_ai.conversation.id", f"conv-{batch}")
            chat.set_attribute("gen_ai.input.messages", _messages(
                ("user", f"How do I download invoice {batch}?")))
            # Every other request is refused, so both outcomes are exercised.
            chat.set_attribute("gen_ai.output.messages", _messages(
                ("assistant", REFUSAL if batch % 2 else ANSWER)))
        with tracer.start_as_current_span("openai.chat", kind=SpanKind.CLIENT) as legacy:
            legacy.set_attribute("gen_ai.system", "openai")
            legacy.set_attribute("llm.request.type", "chat")
            legacy.set_attribute("gen_ai.prompt.0.role", "user")
            legacy.set_attribute("gen_ai.prompt.0.content", "Thanks! Anything else?")
            legacy.set_attribute("gen_ai.completion.0.role", "assistant")
            legacy.set_attribute("gen_ai.completion.0.content", ANSWER)


async def test_otlp_batches_give_results_skips_and_dead_letters(
        broker: Broker, sdk: tuple[Tracer, InMemorySpanExporter]) -> None:
    tracer, exporter = sdk
    topics = Topics.fresh("otlp")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(broker.bootstrap, topics,
                            inputs=[{"topic": topics.inputs, "format": "otlp_proto"}])

    values: list[bytes] = []
    expected: dict[str, bool] = {}  # event_id -> passed (not refused)
    for batch in range(BATCHES):
        exporter.clear()
        request_spans(tracer, batch)
        spans = exporter.get_finished_spans()
        assert len(spans) == 6
        for span in spans:
            attributes = span.attributes or {}
            if "gen_ai.output.messages" in attributes or "gen_ai.completion.0.content" in \
                    attributes:
                assert span.context is not None
                event_id = f"{span.context.trace_id:032x}-{span.context.span_id:016x}"
                expected[event_id] = not (
                    "gen_ai.output.messages" in attributes and batch % 2 == 1)
        values.append(encode_spans(spans).SerializeToString())
    garbage = [b"\xff\xff\xff\xff garbage", dump_json({"input": "hi", "output": "flat json"}),
               b"\x10\x01"]
    # Garbage in the middle: the batches after it must still be processed.
    values = values[:3] + garbage + values[3:]
    ends = await produce(broker.bootstrap, topics.inputs, values,
                         keys=[str(i).encode() for i in range(len(values))])

    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)
    async with running(worker):
        await wait_for(lambda: _reached(broker, topics, ends), timeout=60,
                       what="committed offsets to reach the end")

    published = await results(broker.bootstrap, topics.results, expect=len(expected))
    assert len(published) == len(expected) == 2 * BATCHES
    assert {r["event_id"] for r in published} == set(expected)
    for result in published:
        assert result["evaluator"] == "refusal"
        assert result["status"] == "ok"
        assert result["app"] == "support-bot"
        assert result["_key"] == str(result["trace_id"]).encode()
        assert result["event_id"] == f"{result['trace_id']}-{result['span_id']}"
        assert result["passed"] is expected[str(result["event_id"])], result["event_id"]
    assert sum(1 for r in published if r["passed"] is False) == BATCHES // 2
    sessions = {r["session_id"] for r in published}
    assert {f"conv-{b}" for b in range(BATCHES)} <= sessions

    def skipped(reason: str) -> float | None:
        return registry.get_sample_value("evalstream_events_skipped_total", {"reason": reason})

    assert skipped("not_llm") == 3 * BATCHES  # agent, retrieval and tool spans
    assert skipped("no_content") == BATCHES
    assert skipped("bad_span") is None
    assert registry.get_sample_value("evalstream_events_decoded_total",
                                     {"format": "otlp_proto"}) == 2 * BATCHES

    dead = await read_all(broker.bootstrap, topics.dead_letter, expect=len(garbage), timeout=30)
    assert len(dead) == len(garbage)
    by_value = {record.value: dict(record.headers) for record in dead}  # type: ignore[attr-defined]
    assert set(by_value) == set(garbage)
    assert by_value[garbage[0]]["reason"] == b"invalid_protobuf"
    assert by_value[garbage[1]]["reason"] == b"invalid_protobuf"
    assert by_value[garbage[2]]["reason"] == b"not_otlp"
    for headers in by_value.values():
        assert headers["source_topic"].decode() == topics.inputs
    assert registry.get_sample_value("evalstream_dead_letters_total",
                                     {"reason": "invalid_protobuf"}) == 2


async def _reached(broker: Broker, topics: Topics, ends: dict[int, int]) -> bool:
    got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
    return all(got.get(p, 0) >= end for p, end in ends.items())
