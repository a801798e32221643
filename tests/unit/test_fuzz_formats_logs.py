"""Property: the logs decoders (``otlp_logs_json``, ``otlp_logs_proto``), given log records
of every GenAI event shape with arbitrary attribute and body values, or the real captured
log batches mutated, return events and counted skips or dead-letter with a documented
reason; never another exception. (Arbitrary bytes: ``test_fuzz_formats.test_any_bytes``.)
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.logs.v1.logs_pb2 import LogsData

from tests.fixtures import otlp
from tests.support.fuzz import FUZZ, mutate
from tests.unit.test_formats_otlp_captured import _logs_to_proto
from tests.unit.test_fuzz_formats import (
    EVENT_KEYS,
    EVENT_NAMES,
    JUNK_ANY,
    _json_any,
    _json_safe,
    _proto_any,
    _proto_text,
    attribute_values,
    check,
    kafka_timestamps,
    resources,
    span_attributes,
)

LOG_FIXTURES = ("real_openai_v2_event_only_logs", "real_openllmetry_events_logs")
TRACE = "0af7651916cd43dd8448eb211c80319c"

records = st.fixed_dictionaries({
    "name": st.sampled_from((*EVENT_NAMES, "", "app.log")),
    "name_as_attribute": st.booleans(),
    "attributes": span_attributes,
    "body": st.one_of(st.none(), st.dictionaries(st.sampled_from((*EVENT_KEYS, "role")),
                                                 attribute_values, max_size=3),
                      attribute_values),
    "trace": st.sampled_from([TRACE, "", "zz" * 16, "ab"]),
    "span": st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7", "", "x" * 16]),
    "time": st.integers(0, 2**64 - 1), "observed": st.integers(0, 2**64 - 1),
})


def _attributes(record: dict[str, Any]) -> dict[str, Any]:
    attrs = dict(record["attributes"])
    if record["name_as_attribute"]:
        attrs["event.name"] = record["name"]
    return attrs


def _logs_json(resource: dict[str, Any], found: list[dict[str, Any]], junk: Any) -> bytes:
    out = []
    for r in found:
        item: dict[str, Any] = {
            "traceId": r["trace"], "spanId": r["span"], "timeUnixNano": str(r["time"]),
            "observedTimeUnixNano": str(r["observed"]),
            "attributes": [{"key": k, "value": _json_any(v)}
                           for k, v in _attributes(r).items()],
            "body": junk if junk is not None else _json_any(r["body"])}
        if not r["name_as_attribute"]:
            item["eventName"] = r["name"]
        out.append(item)
    doc = {"resourceLogs": [{
        "resource": {"attributes": [{"key": k, "value": _json_any(v)}
                                    for k, v in resource.items()]},
        "scopeLogs": [{"scope": {"name": "fuzz"}, "logRecords": out}]}]}
    return orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS)


def _logs_proto(resource: dict[str, Any], found: list[dict[str, Any]]) -> bytes:
    data = LogsData()
    rl = data.resource_logs.add()
    for k, v in resource.items():
        _proto_any(v, rl.resource.attributes.add(key=k).value)
    sl = rl.scope_logs.add()
    for r in found:
        record = sl.log_records.add(time_unix_nano=r["time"],
                                    observed_time_unix_nano=r["observed"])
        if not r["name_as_attribute"]:
            record.event_name = _proto_text(r["name"])
        for field, hex_id in (("trace_id", r["trace"]), ("span_id", r["span"])):
            try:
                setattr(record, field, bytes.fromhex(hex_id))
            except ValueError:
                setattr(record, field, hex_id.encode())
        for k, v in _attributes(r).items():
            _proto_any(v, record.attributes.add(key=k).value)
        if r["body"] is not None:
            _proto_any(r["body"], record.body)
    return data.SerializeToString()


@FUZZ
@given(resource=resources, found=st.lists(records, min_size=1, max_size=4),
       junk=st.one_of(st.none(), st.sampled_from(JUNK_ANY)), timestamp=kafka_timestamps)
def test_otlp_logs_json_records_of_every_event_shape(
        resource: dict[str, Any], found: list[dict[str, Any]], junk: Any,
        timestamp: int | None) -> None:
    if _json_safe({"r": resource, "f": found}):
        check("otlp_logs_json", _logs_json(resource, found, junk), timestamp)


@FUZZ
@given(resource=resources, found=st.lists(records, min_size=1, max_size=4),
       timestamp=kafka_timestamps)
def test_otlp_logs_proto_records_of_every_event_shape(
        resource: dict[str, Any], found: list[dict[str, Any]], timestamp: int | None) -> None:
    check("otlp_logs_proto", _logs_proto(resource, found), timestamp)


@FUZZ
@given(data=st.data(), name=st.sampled_from(LOG_FIXTURES), timestamp=kafka_timestamps)
def test_otlp_logs_json_mutated_fixtures(data: st.DataObject, name: str,
                                         timestamp: int | None) -> None:
    doc = data.draw(mutate(otlp.load(name)))
    check("otlp_logs_json", orjson.dumps(doc), timestamp)


@FUZZ
@given(name=st.sampled_from(LOG_FIXTURES), edits=st.lists(
    st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255),
              st.sampled_from(["set", "cut", "insert"])), min_size=1, max_size=4))
def test_otlp_logs_proto_corrupted_fixture_bytes(name: str,
                                                 edits: list[tuple[float, int, str]]) -> None:
    data = bytearray(_logs_to_proto(otlp.load(name)))
    for where, byte, op in edits:
        at = int(where * len(data)) if data else 0
        if op == "set" and data:
            data[at] = byte
        elif op == "cut":
            del data[max(at, 1):]
        else:
            data.insert(at, byte)
    check("otlp_logs_proto", bytes(data))


def test_the_record_generators_reach_events() -> None:
    """The generators above are not vacuous: a details record and a user message + choice
    pair decode to events through both encodings."""
    details = {"name": "gen_ai.client.inference.operation.details", "name_as_attribute": False,
               "attributes": {"gen_ai.operation.name": "chat",
                              "gen_ai.input.messages": '[{"role": "user", "content": "hi"}]',
                              "gen_ai.output.messages": '[{"role": "assistant", "content": "yo"}]'},
               "body": None, "trace": TRACE, "span": "b7ad6b7169203331", "time": 1, "observed": 2}
    user = {**details, "name": "gen_ai.user.message", "name_as_attribute": True,
            "attributes": {"gen_ai.system": "openai"}, "body": {"content": "q"},
            "span": "00f067aa0ba902b7"}
    choice = {**user, "name": "gen_ai.choice", "body": {"message": {"content": "a"}}}
    for decoded in (check("otlp_logs_json", _logs_json({}, [details, user, choice], None)),
                    check("otlp_logs_proto", _logs_proto({}, [details, user, choice]))):
        assert decoded is not None
        assert sorted((e.input, e.output) for e in decoded.events) == [("hi", "yo"), ("q", "a")]
