"""OTLP values the spec allows but says mean nothing: an empty ``AnyValue`` (no field set, or
OTLP/JSON ``null``) is no value, and an all-zero trace or span id is an invalid id. Checked on
both encodings (the protobuf one re-encoded from the same JSON document)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from evalstream.config import InputTopic
from evalstream.events import RawRecord
from evalstream.formats import decoder_for
from evalstream.formats.base import Decoded
from tests.fixtures import otlp

FORMATS = ("otlp_json", "otlp_proto")


def _decode(doc: dict[str, Any], fmt: str) -> Decoded:
    value = orjson.dumps(doc) if fmt == "otlp_json" else otlp.to_proto(doc)
    decoder = decoder_for(InputTopic(topic="spans", format=fmt))
    return decoder(RawRecord(topic="spans", partition=0, offset=7, value=value))


def _with(span_attrs: dict[str, Any], resource_attrs: dict[str, Any] | None = None,
          **span_fields: str) -> dict[str, Any]:
    """The semconv fixture with span (and resource) attribute values replaced or added."""
    doc = otlp.load("semconv_json_strings")
    rs = doc["resourceSpans"][0]
    span = rs["scopeSpans"][0]["spans"][0]
    for attrs, new in ((span["attributes"], span_attrs), (rs["resource"]["attributes"],
                                                          resource_attrs or {})):
        attrs[:] = [kv for kv in attrs if kv["key"] not in new]
        attrs.extend({"key": key, "value": value} for key, value in new.items())
    span.update(span_fields)
    return doc


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_empty_value_is_no_value_not_the_text_none(fmt: str) -> None:
    # Before: str(None), so every such span had session "None" (one session for all of
    # them), app "None" and model "None".
    doc = _with({"gen_ai.conversation.id": {}, "gen_ai.request.model": {},
                 "gen_ai.response.model": {}, "session.id": {}},
                {"service.name": {}})
    [event] = _decode(doc, fmt).events
    assert event.session_id is None
    assert event.app is None
    assert "model" not in event.attributes
    assert "None" not in event.attributes.values()


def test_a_null_otlp_json_value_field_is_no_value() -> None:
    # Protobuf's JSON mapping reads null as "not set".
    doc = _with({"gen_ai.conversation.id": {"stringValue": None},
                 "gen_ai.usage.input_tokens": {"intValue": None}})
    [event] = _decode(doc, "otlp_json").events
    assert event.session_id is None
    assert "input_tokens" not in event.attributes


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_items_of_an_array_value_are_left_out(fmt: str) -> None:
    doc = _with({"gen_ai.response.finish_reasons": {"arrayValue": {"values": [
        {}, {"stringValue": "stop"}]}}})
    [event] = _decode(doc, fmt).events
    assert event.attributes["finish_reasons"] == "stop"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("field", ["traceId", "spanId"])
def test_an_all_zero_id_is_a_bad_span(fmt: str, field: str) -> None:
    # OTLP: an all-zero trace or span id is invalid. Taken as an id, every such span got
    # the same event id, so different calls' results shared result ids (and de-duplicated
    # each other away downstream).
    zero = "0" * (32 if field == "traceId" else 16)
    decoded = _decode(_with({}, **{field: zero}), fmt)
    assert decoded.events == []
    assert decoded.skipped == {"bad_span": 1}
    assert _decode(_with({}), fmt).events  # the fixture itself decodes
