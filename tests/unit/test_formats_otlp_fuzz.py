"""Robustness: corrupted OTLP messages end as a DecodeError (dead letter) or as a Decoded
with the bad parts counted, never as another exception (which would cost the whole batch)."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from evalstream.config import InputTopic
from evalstream.errors import DecodeError
from evalstream.formats import otlp_json, otlp_proto
from evalstream.formats.base import Decoded
from evalstream.formats.genai import Options
from tests.fixtures import otlp

NAMES = ["semconv_json_strings", "semconv_structured", "legacy_openllmetry", "openinference",
         "span_events"]
OPTIONS = Options.from_topic(InputTopic(topic="t"))
JUNK: list[Any] = [None, 1, "x", [], {}, [1], {"a": 1}, True, 1.5, {"stringValue": 5},
                   {"intValue": "abc"}, {"arrayValue": 3}, "[1", '[{"role": 5}]',
                   '{"parts": 3}', "99999999999999999999999999", -1, {"kvlistValue": []}]


def _decode_or_dead_letter(decode: Any, value: bytes) -> Decoded | None:
    try:
        decoded: Decoded = decode(value, OPTIONS)
    except DecodeError:
        return None
    return decoded


def test_corrupted_protobuf_bytes() -> None:
    rng = random.Random(11)
    outcomes = {"decoded": 0, "dead": 0}
    for _ in range(600):
        data = bytearray(otlp.to_proto(otlp.load(rng.choice(NAMES))))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            op = rng.random()
            if op < 0.5:
                data[at] = rng.randrange(256)
            elif op < 0.8:
                del data[max(at, 1):]
            else:
                data.insert(at, rng.randrange(256))
        decoded = _decode_or_dead_letter(otlp_proto.decode, bytes(data))
        outcomes["decoded" if decoded is not None else "dead"] += 1
    # Both paths are exercised (most corruptions break the wire format).
    assert outcomes["decoded"] > 20
    assert outcomes["dead"] > 200


def _paths(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*path, i))


def test_structurally_corrupted_otlp_json() -> None:
    rng = random.Random(5)
    bad_spans = 0
    for _ in range(600):
        doc = otlp.load(rng.choice(NAMES))
        path = rng.choice(list(_paths(doc))[1:])
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = copy.deepcopy(rng.choice(JUNK))
        decoded = _decode_or_dead_letter(otlp_json.decode, orjson.dumps(doc))
        if decoded is not None:
            bad_spans += decoded.skipped["bad_span"]
            for event in decoded.events:
                assert len(event.trace_id) == 32
                assert len(event.span_id) == 16
    assert bad_spans > 50


@pytest.mark.parametrize("when", ["99999999999999999999999", "-5"])
def test_out_of_range_times_cost_only_their_span(when: str) -> None:
    doc = otlp.load("semconv_structured")
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[2]["endTimeUnixNano"] = when
    decoded = otlp_json.decode(orjson.dumps(doc), OPTIONS)
    if when.startswith("-"):
        assert decoded.events[0].timestamp is not None
        assert decoded.events[0].timestamp.year == 1969
    else:
        assert decoded.skipped["bad_span"] == 1
        assert decoded.events == []


def test_deeply_nested_values_cost_only_their_span() -> None:
    doc = otlp.load("semconv_json_strings")
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(80):
        value = {"arrayValue": {"values": [value]}}
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    # Appended last, so it replaces the real messages attribute.
    span["attributes"].append({"key": "gen_ai.input.messages", "value": value})
    good = otlp.load("semconv_json_strings")["resourceSpans"][0]
    doc["resourceSpans"].append(good)
    decoded = otlp_json.decode(orjson.dumps(doc), OPTIONS)
    assert decoded.skipped == {"bad_span": 1}
    assert len(decoded.events) == 1
