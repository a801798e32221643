"""What one OTLP message may cost to decode: bounded context, events, spans and containers
per message.

Sizes and counts are asserted (tracemalloc peaks, tuple lengths, skip counts), never time.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.formats import genai, otlp_json, otlp_proto
from evalstream.formats.base import Decoded
from evalstream.formats.genai import (
    MAX_CONTAINERS_PER_MESSAGE,
    MAX_CONTEXT_CHARS,
    MAX_CONTEXT_DOCUMENTS,
    MAX_SPANS_PER_MESSAGE,
    Options,
)

TRACE = "0" * 31 + "1"


def kv(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def retriever(span_id: int, docs: list[str], end: int = 1) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": f"{span_id:016x}", "endTimeUnixNano": str(end),
            "attributes": [kv("openinference.span.kind", "RETRIEVER"),
                           kv("gen_ai.retrieval.documents", orjson.dumps(docs).decode())]}


def chat(span_id: int, end: int = 5, extra: list[dict[str, Any]] | None = None
         ) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": f"{span_id:016x}", "endTimeUnixNano": str(end),
            "attributes": [kv("gen_ai.operation.name", "chat"),
                           kv("gen_ai.completion.0.content", "y"), *(extra or [])]}


def message(*spans: dict[str, Any], resource: list[dict[str, Any]] | None = None) -> bytes:
    return orjson.dumps({"resourceSpans": [{"resource": {"attributes": resource or []},
                                            "scopeSpans": [{"spans": list(spans)}]}]})


def decode_json(raw: bytes, **topic: Any) -> Decoded:
    return otlp_json.decode(raw, Options.from_topic(InputTopic(topic="t", format="otlp_json",
                                                               **topic)))


def decode_proto(raw: bytes) -> Decoded:
    return otlp_proto.decode(raw, Options.from_topic(InputTopic(topic="t",
                                                                format="otlp_proto")))


def test_inherited_context_does_not_multiply_documents_by_chat_spans() -> None:
    # The reviewer's shape: one retriever with many tiny documents, many small chat spans.
    docs, chats = 5_000, 500
    raw = message(retriever(1 << 60, ["x"] * docs), *(chat(i) for i in range(1, chats + 1)))
    tracemalloc.start()
    try:
        decoded = decode_json(raw)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoded.events) == chats
    assert {len(e.context) for e in decoded.events} == {MAX_CONTEXT_DOCUMENTS}
    # Unbounded, this was 500 x 5,000 references (> 20 MB); now it is a few times the input.
    assert peak < 40 * len(raw), (peak, len(raw))


def test_context_is_the_earlier_documents_in_end_order_bounded() -> None:
    first = [f"a{i}" for i in range(MAX_CONTEXT_DOCUMENTS - 2)]
    raw = message(
        chat(1, end=10),  # before any retrieval ended: no context
        retriever(2, ["late"], end=40),  # listed first but ended after the next one
        retriever(3, first, end=20),
        chat(4, end=30),
        chat(5, end=50),
        chat(6, end=50),
    )
    by_id = {e.span_id[-1]: e.context for e in decode_json(raw).events}
    assert by_id["1"] == ()
    assert by_id["4"] == tuple(first)
    assert by_id["5"] == (*first, "late")
    assert by_id["5"] == by_id["6"]


def test_context_characters_are_bounded_and_the_crossing_document_is_cut() -> None:
    big = "b" * MAX_CONTEXT_CHARS
    raw = message(retriever(1, ["head", big, "dropped"]), chat(2))
    (event,) = decode_json(raw).events
    assert event.context == ("head", "b" * (MAX_CONTEXT_CHARS - 4))
    assert sum(map(len, event.context)) == MAX_CONTEXT_CHARS


def test_documents_on_the_chat_span_itself_are_bounded_too() -> None:
    docs = [f"d{i}" for i in range(MAX_CONTEXT_DOCUMENTS * 3)]
    own = kv("gen_ai.retrieval.documents", orjson.dumps(docs).decode())
    (event,) = decode_json(message(chat(1, extra=[own]))).events
    assert event.context == tuple(docs[:MAX_CONTEXT_DOCUMENTS])


def test_resource_attribute_values_are_resolved_once_per_resource() -> None:
    # A mapped resource attribute used to be converted (here: joined) again for every event.
    tags = {"key": "team.tags",
            "value": {"arrayValue": {"values": [{"stringValue": f"t{i}"} for i in range(200)]}}}
    raw = message(*(chat(i) for i in range(1, 21)), resource=[tags])
    events = decode_json(raw, attribute_map={"tags": "team.tags"}).events
    first = events[0].attributes["tags"]
    assert first.startswith("t0,t1,")
    assert all(e.attributes["tags"] is first for e in events)


def test_chat_spans_past_the_event_cap_are_counted_not_lost(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(genai, "MAX_EVENTS_PER_MESSAGE", 7)
    raw = message(*(chat(i) for i in range(1, 11)), retriever(99, ["d"]))
    decoded = decode_json(raw)
    assert len(decoded.events) == 7
    assert decoded.skipped == {"too_many_events": 3, "not_llm": 1}


def test_the_event_cap_leaves_room_for_real_batches() -> None:
    # A Collector batch (send_batch_size 8192) is mostly spans without content.
    assert genai.MAX_EVENTS_PER_MESSAGE >= 1_000
    assert MAX_SPANS_PER_MESSAGE >= 8_192


def test_protobuf_spans_past_the_span_cap_are_counted_without_being_built() -> None:
    data = TracesData()
    scope = data.resource_spans.add().scope_spans.add()
    for _ in range(MAX_SPANS_PER_MESSAGE + 1_000):
        scope.spans.add()
    decoded = decode_proto(data.SerializeToString())
    assert decoded.events == []
    assert decoded.skipped == {"not_genai": MAX_SPANS_PER_MESSAGE, "too_many_spans": 1_000}


def test_json_spans_past_the_span_cap_are_counted_without_being_built() -> None:
    raw = orjson.dumps({"resourceSpans": [{"scopeSpans": [
        {"spans": [{}] * (MAX_SPANS_PER_MESSAGE + 5)}]}]})
    decoded = decode_json(raw)
    assert decoded.skipped == {"not_genai": MAX_SPANS_PER_MESSAGE, "too_many_spans": 5}


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_the_span_cap_spans_resources_and_scopes_and_keeps_the_first_spans(
        fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(genai, "MAX_SPANS_PER_MESSAGE", 4)
    monkeypatch.setattr(otlp_json, "MAX_SPANS_PER_MESSAGE", 4)
    # 3 resources x 2 scopes x 1 chat span: the first 4 are decoded, in message order.
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [chat(r * 2 + s + 1)]} for s in range(2)]}
                             for r in range(3)]}
    raw = orjson.dumps(doc)
    if fmt == "otlp_proto":
        from google.protobuf import json_format

        proto = json_format.ParseDict(_proto_ids(doc), TracesData())
        decoded = decode_proto(proto.SerializeToString())
    else:
        decoded = decode_json(raw)
    assert [int(e.span_id, 16) for e in decoded.events] == [1, 2, 3, 4]
    assert decoded.skipped == {"too_many_spans": 2}


def _proto_empty_resources(count: int) -> bytes:
    data = TracesData()
    for _ in range(count):
        data.resource_spans.add()
    return data.SerializeToString()


def _proto_empty_scopes(count: int) -> bytes:
    data = TracesData()
    resource = data.resource_spans.add()
    for _ in range(count):
        resource.scope_spans.add()
    return data.SerializeToString()


@pytest.mark.parametrize(("fmt", "raw"), [
    # The reviewer's shapes, at the real cap: containers that hold no span never reached the
    # span cap, so each one was walked in Python (0.7-1.5 s per MB on the event loop).
    ("otlp_proto", _proto_empty_resources(MAX_CONTAINERS_PER_MESSAGE + 1)),
    ("otlp_proto", _proto_empty_scopes(MAX_CONTAINERS_PER_MESSAGE)),  # + its 1 resource
    ("otlp_json", orjson.dumps({"resourceSpans": [{}] * (MAX_CONTAINERS_PER_MESSAGE + 1)})),
    ("otlp_json", orjson.dumps({"resourceSpans": [
        {"scopeSpans": [{}] * MAX_CONTAINERS_PER_MESSAGE}]})),
    # Malformed entries are containers too (they used to be walked, one bad_span each).
    ("otlp_json", orjson.dumps({"resourceSpans": [1] * (MAX_CONTAINERS_PER_MESSAGE + 1)})),
], ids=["proto_resources", "proto_scopes", "json_resources", "json_scopes", "json_malformed"])
def test_a_message_of_too_many_empty_containers_is_dead_lettered(fmt: str, raw: bytes) -> None:
    decode = decode_proto if fmt == "otlp_proto" else decode_json
    with pytest.raises(DecodeError) as caught:
        decode(raw)
    assert caught.value.reason == "too_many_containers"
    assert str(MAX_CONTAINERS_PER_MESSAGE) in str(caught.value)


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_the_container_cap_counts_resources_and_scopes_and_is_inclusive(
        fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 resources x 1 scope x 1 chat span = 6 containers.
    def encode(resources: int) -> bytes:
        doc = {"resourceSpans": [{"scopeSpans": [{"spans": [chat(r + 1)]}]}
                                 for r in range(resources)]}
        if fmt == "otlp_json":
            return orjson.dumps(doc)
        from google.protobuf import json_format

        return json_format.ParseDict(_proto_ids(doc), TracesData()).SerializeToString()

    decode = decode_proto if fmt == "otlp_proto" else decode_json
    monkeypatch.setattr(genai, "MAX_CONTAINERS_PER_MESSAGE", 6)
    decoded = decode(encode(3))
    assert [int(e.span_id, 16) for e in decoded.events] == [1, 2, 3]
    assert decoded.skipped == {}
    monkeypatch.setattr(genai, "MAX_CONTAINERS_PER_MESSAGE", 5)
    with pytest.raises(DecodeError) as caught:
        decode(encode(3))
    assert caught.value.reason == "too_many_containers"


@pytest.mark.parametrize("fmt", ["otlp_json", "otlp_proto"])
def test_past_the_span_cap_the_remaining_containers_are_bounded_too(
        fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # One span per resource: past the span cap each further resource was still walked to
    # count its spans as too_many_spans, so the span cap alone did not bound the walk.
    monkeypatch.setattr(genai, "MAX_SPANS_PER_MESSAGE", 2)
    monkeypatch.setattr(otlp_json, "MAX_SPANS_PER_MESSAGE", 2)
    monkeypatch.setattr(genai, "MAX_CONTAINERS_PER_MESSAGE", 10)
    def encode(resources: int) -> bytes:
        if fmt == "otlp_json":
            return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]
                                 * resources})
        data = TracesData()
        for _ in range(resources):
            data.resource_spans.add().scope_spans.add().spans.add()
        return data.SerializeToString()

    decode = decode_proto if fmt == "otlp_proto" else decode_json
    decoded = decode(encode(5))  # 10 containers: kept
    assert decoded.skipped == {"not_genai": 2, "too_many_spans": 3}
    with pytest.raises(DecodeError, match="resources and scopes") as caught:
        decode(encode(6))
    assert caught.value.reason == "too_many_containers"


def test_the_container_cap_never_rejects_what_the_span_cap_decodes_in_full() -> None:
    # A Collector gateway appends its senders' ResourceSpans unmerged: a batch can hold one
    # resource and one scope per span. Only empty containers can exceed twice the spans.
    assert MAX_CONTAINERS_PER_MESSAGE >= 2 * MAX_SPANS_PER_MESSAGE


def test_resources_without_spans_are_not_built() -> None:
    # A JSON resource is only resolved for spans to attribute: one without spans (or whose
    # spans are all past the span cap) costs a length, and cannot make a bad_span.
    raw = orjson.dumps({"resourceSpans": [{"resource": {"attributes": "not a list"}},
                                          {"resource": {"attributes": "not a list"},
                                           "scopeSpans": [{"spans": []}]}]})
    assert decode_json(raw).skipped == {"empty_batch": 1}


def _proto_ids(doc: Any) -> Any:
    """The protobuf JSON mapping reads ids as base64: re-encode the hex ids."""
    import base64

    if isinstance(doc, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode()
                    if k in ("traceId", "spanId") else _proto_ids(v)) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_proto_ids(v) for v in doc]
    return doc
