"""flat_json decoding: mapping, derived fields, reason codes, and the sampling shortcut."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from evalstream.config import InputTopic
from evalstream.errors import ConfigError, DecodeError
from evalstream.events import RawRecord, TraceEvent, dump_json, stable_hash
from evalstream.formats.flat_json import SAMPLED_OUT, make_decoder
from tests.support.probe import sampling_probe

SECRET = "my card number is 4111"


def record(value: bytes | None, offset: int = 7, ts: int | None = 1_700_000_000_000
           ) -> RawRecord:
    return RawRecord("traces", 2, offset, value, timestamp=ts)


def decode(obj: Any, topic: InputTopic | None = None, **kw: Any) -> TraceEvent:
    decoder = make_decoder(topic or InputTopic(topic="traces"))
    (event,) = decoder.decode(record(dump_json(obj)), **kw).events
    return event


def reason(value: bytes | None, topic: InputTopic | None = None) -> str:
    decoder = make_decoder(topic or InputTopic(topic="traces"))
    with pytest.raises(DecodeError) as info:
        decoder(record(value))
    assert SECRET not in str(info.value)  # messages never quote the content
    return info.value.reason


def test_fields_by_name_with_defaults() -> None:
    event = decode({"event_id": "s1", "trace_id": "t1", "input": "q", "output": "a",
                    "app": "bot", "attributes": {"model": "m", "n": 3, "ok": True},
                    "context": "one doc", "timestamp": "2026-01-02T03:04:05Z", "extra": 1})
    assert event.event_id == "s1"
    assert event.trace_id == "t1"
    assert event.attributes == {"model": "m", "n": "3", "ok": "true"}
    assert event.context == ("one doc",)
    assert event.timestamp == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_ids_default_to_a_hash_of_the_position() -> None:
    event = decode({"output": "a"})
    assert event.event_id == stable_hash("traces", 2, 7)
    assert event.trace_id == event.event_id
    assert event.timestamp == datetime.fromtimestamp(1_700_000_000, UTC)
    assert decode({"output": "a", "event_id": 12}).event_id == "12"


def test_mapping_reads_dotted_paths_and_list_indexes() -> None:
    topic = InputTopic(topic="traces", mapping={
        "output": "response.text", "input": "request.messages.0.content",
        "trace_id": "meta.trace", "session_id": "meta.session"})
    event = decode({"response": {"text": "answer"},
                    "request": {"messages": [{"role": "user", "content": "question"}]},
                    "meta": {"trace": "T", "session": "S"}, "output": "ignored"}, topic)
    assert (event.output, event.input, event.trace_id, event.session_id) == (
        "answer", "question", "T", "S")


def test_input_and_output_come_from_messages() -> None:
    event = decode({"messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant", "content": "hello"}]})
    assert event.input == "hi\nthere"
    assert event.output == "hello"
    assert [m.role for m in event.messages] == ["system", "user", "assistant"]


@pytest.mark.parametrize(("value", "expected"), [
    (None, "empty"), (b"", "empty"),
    (b"{not json", "invalid_json"), (b'{"output": "' + SECRET.encode() + b'"', "invalid_json"),
    (b'{"output": "caf\xe9"}', "invalid_utf8"), (b"\xff\xfe", "invalid_utf8"),
    (b"[1, 2]", "not_an_object"), (b"42", "not_an_object"), (b"null", "not_an_object"),
    (dump_json({"input": SECRET}), "missing_output"),
    (dump_json({"messages": [{"role": "user", "content": "q"}]}), "missing_output"),
    (dump_json({"output": 5}), "invalid_field"),
    (dump_json({"output": "a", "messages": "x"}), "invalid_field"),
    (dump_json({"output": "a", "attributes": {"k": {"nested": SECRET}}}), "invalid_field"),
    (dump_json({"output": "a", "timestamp": "not a time"}), "invalid_field"),
])
def test_reason_codes(value: bytes | None, expected: str) -> None:
    assert reason(value) == expected


def test_error_messages_name_fields_never_keys_from_the_message() -> None:
    # Dead-letter errors are logged by default: a key taken from the message is content.
    decoder = make_decoder(InputTopic(topic="traces"))
    body = {"output": "a", "attributes": {SECRET: {"n": 1}},
            "messages": [{"role": "user", "content": 5}]}
    with pytest.raises(DecodeError) as info:
        decoder(RawRecord("traces", 0, 0, dump_json(body)))
    assert SECRET not in str(info.value)
    assert "attributes.*: string_type" in str(info.value)


def test_missing_output_names_the_keys_the_mapping_reads() -> None:
    # The example config maps output to response.text: the README's canary, whose answer
    # is a top-level "output", was dead-lettered as "no output ... in the message".
    mapped = InputTopic(topic="traces", mapping={"output": "response.text",
                                                 "messages": "request.messages"})
    body = dump_json({"output": SECRET, "input": SECRET})
    for topic, keys in ((mapped, ("'response.text'", "'request.messages'")),
                        (InputTopic(topic="traces"), ("'output'", "'messages'"))):
        with pytest.raises(DecodeError) as info:
            make_decoder(topic)(record(body if topic is mapped else dump_json({"input": 1})))
        assert info.value.reason == "missing_output"
        assert all(key in str(info.value) for key in keys), str(info.value)
        assert SECRET not in str(info.value)


def test_unknown_mapping_fields_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="answer"):
        make_decoder(InputTopic(topic="t", mapping={"answer": "x"}))
    with pytest.raises(ConfigError, match=r"mapping\.output"):
        make_decoder(InputTopic(topic="t", mapping={"output": "a..b"}))


CASES: list[dict[str, Any]] = [
    {"trace_id": f"t{i}", "output": "a", "input": "q", "app": "x",
     "attributes": {"k": "v"}, "timestamp": "2026-01-01T00:00:00Z"} for i in range(40)
] + [
    {"event_id": f"e{i}", "output": "a", "messages": [{"role": "user", "content": "q"}],
     "context": ["d"]} for i in range(40)
] + [
    {"output": "a", "attributes": {"n": i}} for i in range(40)  # needs coercion: full path
]


def keep_half(value: str) -> bool:
    return int(stable_hash(value)[:2], 16) % 2 == 0


@pytest.mark.parametrize("key", ["trace_id", "event_id", "session_id"])
def test_sampling_shortcut_agrees_with_the_full_decode(key: str) -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    for i, obj in enumerate(CASES):
        rec = record(dump_json(obj), offset=i)
        (full,) = decoder(rec).events
        value = getattr(full, key) or full.event_id
        expected_kept = keep_half(value)
        decoded = decoder.decode(rec, key=key, keep=keep_half)
        if expected_kept:
            assert decoded.events == [full]
        else:
            assert decoded is SAMPLED_OUT


def test_wrong_types_are_dead_lettered_even_when_sampled_out() -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    for bad in ({"output": 1}, {"output": "a", "messages": [{"role": "user", "content": 1}]},
                {"output": "a", "attributes": [1]}, {"output": "a", "app": ["x"]},
                {"output": "a", "context": [1]}, {"output": "a", "timestamp": True}):
        with pytest.raises(DecodeError) as info:
            decoder.decode(record(dump_json(bad)), keep=lambda _: False)
        assert info.value.reason == "invalid_field", bad


# Messages the sampling probe must refuse ("decode it fully"): each is a dead letter or
# needs the full decoder's normalising.
PROBE_REFUSES: list[bytes] = [
    b"", b"not json", b"[1, 2]", b'"text"', b"null", b'{"output": "a",}',
    dump_json({"input": "no output"}), dump_json({"output": 1}),
    dump_json({"output": "a", "messages": "not a list"}),
    dump_json({"output": "a", "messages": [{"role": "user", "content": 5}]}),
    dump_json({"output": "a", "attributes": {"nested": {"a": 1}}}),
    dump_json({"output": "a", "attributes": {"n": 1}}),  # valid, but coerced: full path
    dump_json({"output": "a", "context": [1]}), dump_json({"output": "a", "app": ["x"]}),
    dump_json({"output": "a", "timestamp": True}),
    dump_json({"messages": [{"role": "assistant", "content": "derived output"}]}),
    dump_json({"output": "a", "event_id": 7}),  # numeric id: converted by the full path
    dump_json({"output": "a"}),  # no id at all: the full path derives one from the offset
    dump_json({"output": "a", "trace_id": "", "event_id": ""}),
    # Invalid UTF-8 inside a key the probe does not read: orjson rejects it, so must we.
    b'{"output": "a", "other": {"x": "caf\xe9"}}', b'{"output": "a", "o": "\xed\xa0\x80"}',
    # Nested deeper than msgspec recurses (it raises RecursionError, not a MsgspecError).
    b'{"output": "a", "trace_id": "t", "z": ' + b"[" * 5000 + b"]" * 5000 + b"}",
]


@pytest.mark.parametrize("value", PROBE_REFUSES)
def test_sampling_probe_refuses_what_needs_the_full_decoder(value: bytes) -> None:
    probe = sampling_probe(make_decoder(InputTopic(topic="traces")), "trace_id")
    assert probe is not None
    assert probe(value) is None


@pytest.mark.parametrize("key", ["trace_id", "event_id", "session_id"])
def test_sampling_probe_key_is_the_decoded_events_sampling_key(key: str) -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    probe = sampling_probe(decoder, key)
    assert probe is not None
    accepted = 0
    extra = [{"event_id": "e-ü", "trace_id": "t-ü", "output": "ça va ✓"},
             {"event_id": "e1", "output": "a", "unknown": {"deep": [1, None, "x"]}}]
    for i, obj in enumerate(CASES + extra):
        value = dump_json(obj)
        found = probe(value)
        (event,) = decoder(record(value, offset=i)).events  # every case is valid
        if found is not None:
            accepted += 1
            assert found == (getattr(event, key) or event.event_id)
    assert accepted >= 40  # the probe takes the common plain shape


def test_no_sampling_probe_with_a_custom_mapping() -> None:
    topic = InputTopic(topic="traces", mapping={"output": "response.text"})
    assert sampling_probe(make_decoder(topic), "trace_id") is None
