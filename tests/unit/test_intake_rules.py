"""Sampling, routing and decoding behaviour the mutation pass found untested.

Each test here was written against a mutant of ``sampling.py``, ``routing.py``,
``app/intake.py`` or ``formats/flat_json.py`` that the rest of the suite let through; the
docstrings name the bug each one catches.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.intake import SAMPLED_OUT, BatchCounts, Intake
from evalstream.app.pipeline import Pipeline
from evalstream.config import InputTopic, SamplingSettings
from evalstream.errors import DecodeError
from evalstream.events import (
    CANARY_ATTRIBUTE,
    RawRecord,
    TraceEvent,
    dump_json,
    stable_hash,
)
from evalstream.formats.flat_json import FlatJsonDecoder, make_decoder
from evalstream.metrics import Metrics
from evalstream.sampling import SCALE, Sampler
from tests.support.probe import sampling_probe
from tests.unit.pipeline_doubles import JUDGES, raw, settings


def _fmix32(h: int) -> int:
    """MurmurHash3's 32-bit finaliser, written out as the README documents it."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    return h ^ (h >> 16)


def test_the_unsalted_hash_is_plain_crc32_of_the_key() -> None:
    """The documented hash (CRC-32 of the UTF-8 key; with a salt, of salt, NUL and key,
    then MurmurHash3's finaliser): workers of two versions during a rolling deploy, or a
    tool predicting which traces are evaluated, must agree on every decision. A changed
    starting value would reshuffle the sample."""
    plain = Sampler(SamplingSettings())
    salted = Sampler(SamplingSettings(salt="s1"))
    for key in ("4bf92f3577b34da6a3ce929d0e0e4736", "evt-000123", "trace-ü"):
        data = key.encode("utf-8")
        assert plain.fraction_of(key) == zlib.crc32(data) / 2**32
        assert plain.fraction_of_bytes(data) == zlib.crc32(data) / 2**32
        assert salted.fraction_of(key) == _fmix32(zlib.crc32(b"s1\x00" + data)) / 2**32
        assert salted.fraction_of_bytes(data) == salted.fraction_of(key)
    assert plain.key_hash is zlib.crc32
    assert SCALE == 2**32


def test_the_rate_is_an_exclusive_bound() -> None:
    """Rate 0 evaluates nothing, even the key whose hash is 0, and an event exactly at the
    rate is out: the intake's shortcuts drop ``crc >= limit``, the pipeline must agree."""
    assert not Sampler.sampled(0.0, 0.0)
    assert not Sampler.sampled(0.25, 0.25)
    assert Sampler.sampled(0.25 - 2**-32, 0.25)
    assert Sampler.sampled(0.999, 1.0)
    event = TraceEvent(event_id="e", trace_id="t")
    assert not Sampler.sampled(Sampler(SamplingSettings()).fraction(event), 0.0)


# --- intake: the flat_json sampling shortcut ----------------------------------------------


def intake_for(**sections: Any) -> tuple[Intake, Metrics]:
    s = settings(**sections)
    metrics = Metrics(CollectorRegistry())
    return Intake(s, Pipeline(s, JUDGES, metrics), metrics), metrics


def out_key(rate: float, salt: str = "") -> str:
    """A trace id that no route samples at ``rate``."""
    sampler = Sampler(SamplingSettings(salt=salt))
    return next(t for t in (f"t{i}" for i in range(1000))
                if not sampler.sampled(sampler.fraction_of(t), rate))


def skipped(intake: Intake, record: RawRecord) -> bool:
    """Whether intake skips ``record`` undecoded (decided on a group of one)."""
    assert intake.to_decode is not None
    return not intake.to_decode(record.topic, [record])


def test_the_probe_skips_exactly_what_decoding_skips() -> None:
    """The shortcut must never drop a message the full decode path would evaluate: on
    plain messages the two agree one for one, whatever the salt."""
    for salt in ("", "s"):
        intake, _ = intake_for(sampling={"rate": 0.3, "salt": salt})
        assert intake.to_decode is not None  # flat_json, event-key sampling, rate below 1
        records = [raw(i) for i in range(400)]
        out = [skipped(intake, r) for r in records]
        assert out == [intake.decode(r) is SAMPLED_OUT for r in records]
        assert 0.6 * len(records) < sum(out) < 0.8 * len(records)


def test_the_probe_is_only_offered_where_it_can_decide() -> None:
    """At rate 1 nothing is sampled out, and with message-key sampling the Kafka key
    decides: callers then skip the probe altogether."""
    assert intake_for()[0].to_decode is None
    assert intake_for(sampling={"rate": 1.0, "salt": "x"})[0].to_decode is None
    assert intake_for(sampling={"key": "message_key", "rate": 0.3})[0].to_decode is None
    assert intake_for(sampling={"rate": 0.999})[0].to_decode is not None


def test_an_oversized_message_is_dead_lettered_not_sampled_out() -> None:
    intake, _ = intake_for(sampling={"rate": 0.01}, worker={"max_message_bytes": 200})
    assert intake.to_decode is not None
    big = raw(1, "x" * 300, trace_id=out_key(0.01))
    assert not skipped(intake, big)
    with pytest.raises(DecodeError) as info:
        intake.decode(big)
    assert info.value.reason == "too_large"
    small = raw(2, "x" * 100, trace_id=out_key(0.01))
    assert len(small.value or b"") <= 200
    assert skipped(intake, small)


def test_a_message_of_exactly_the_size_limit_is_accepted() -> None:
    """The limit is the largest accepted size ("exceeds" is what is rejected)."""
    body = dump_json({"trace_id": "t", "output": "ok"})
    intake, _ = intake_for(worker={"max_message_bytes": len(body)})
    decoded = intake.decode(RawRecord("traces", 0, 0, body))
    assert [e.output for e in decoded.events] == ["ok"]
    with pytest.raises(DecodeError, match="exceeds"):
        intake.decode(RawRecord("traces", 0, 1, body + b" "))


def test_topics_without_a_probe_are_left_to_their_decoder() -> None:
    """A topic with a custom mapping (raw keys are not field names) or another format
    gets no probe: its messages are never sampled out by it, and never crash it."""
    inputs = [{"topic": "traces"},
              {"topic": "mapped", "mapping": {"output": "response.text"}},
              {"topic": "spans", "format": "otlp_json"}]
    intake, _ = intake_for(sampling={"rate": 0.01}, inputs=inputs)
    assert intake.to_decode is not None
    key = out_key(0.01)
    body = dump_json({"trace_id": key, "output": "plain", "response": {"text": "mapped"}})
    assert skipped(intake, RawRecord("traces", 0, 0, body))
    assert not skipped(intake, RawRecord("mapped", 0, 0, body))
    assert not skipped(intake, RawRecord("spans", 0, 0, body))
    assert not skipped(intake, RawRecord("traces", 0, 1, None))


def in_key(rate: float, salt: str = "") -> str:
    """A trace id that routes sample at ``rate``."""
    sampler = Sampler(SamplingSettings(salt=salt))
    return next(t for t in (f"t{i}" for i in range(1000))
                if sampler.sampled(sampler.fraction_of(t), rate))


@pytest.mark.parametrize("salt", ["", "s"])
def test_a_mixed_group_is_decided_as_its_records_one_by_one(salt: str) -> None:
    """Intake decides a partition's records in one call: every record must keep its own
    decision and its place, whatever its neighbours (a key paired with the wrong record
    would skip a sampled event, or a dead letter)."""
    intake, _ = intake_for(sampling={"rate": 0.3, "salt": salt},
                           worker={"max_message_bytes": 300})
    assert intake.to_decode is not None
    out, kept = out_key(0.3, salt), in_key(0.3, salt)
    cases: list[tuple[bytes | None, bool]] = [  # (value, decoded)
        (dump_json({"trace_id": out, "output": "a"}), False),
        (dump_json({"trace_id": kept, "output": "a"}), True),
        (b'{"trace_id": "' + out.encode() + b'", "output": ', True),  # invalid JSON
        (dump_json({"trace_id": out, "output": 1}), True),  # wrong type: a dead letter
        (dump_json({"trace_id": out, "output": "a",
                    "attributes": {CANARY_ATTRIBUTE: "c1"}}), True),  # maybe a canary
        (dump_json({"trace_id": out, "output": "a"})[:-1] + b', "o": "caf\xe9"}', True),
        (dump_json({"trace_id": out, "output": "ça va ✓"}), False),  # UTF-8, not ASCII
        (dump_json({"trace_id": out, "output": "a" * 300}), True),  # over the size limit
        (None, True),
        (b"", True),
        (dump_json({"trace_id": "", "event_id": out, "output": "a"}), False),  # event_id
        (dump_json({"trace_id": "", "event_id": kept, "output": "a"}), True),
        (dump_json({"output": "a"}), True),  # no key: the full decoder derives one
        (dump_json({"trace_id": out, "output": "b"}), False),
    ]
    records = [RawRecord("traces", 0, i, value) for i, (value, _) in enumerate(cases)]
    expected = [r for r, (_, decoded) in zip(records, cases, strict=True) if decoded]
    assert [r for r in records if not skipped(intake, r)] == expected
    assert intake.to_decode("traces", records) == expected
    assert intake.to_decode("traces", records[::-1]) == expected[::-1]


def test_flush_adds_every_count_of_the_batch() -> None:
    intake, metrics = intake_for(inputs=[{"topic": "traces"},
                                         {"topic": "spans", "format": "otlp_json"}])
    counts = BatchCounts()
    counts.decoded["traces"] += 3
    counts.decoded["spans"] += 2
    counts.sampled_out = 4
    counts.skipped.update({"not_genai": 5, "no_route": 1})
    intake.flush(counts)

    def value(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    assert value("evalstream_events_decoded_total", format="flat_json") == 3
    assert value("evalstream_events_decoded_total", format="otlp_json") == 2
    assert value("evalstream_events_skipped_total", reason="sampling") == 4
    assert value("evalstream_events_skipped_total", reason="not_genai") == 5
    assert value("evalstream_events_skipped_total", reason="no_route") == 1


def test_a_message_sampled_in_on_its_key_is_not_resampled_on_its_trace_id() -> None:
    """With ``sampling.key: message_key`` the Kafka key already decided: decoding with
    ``presampled`` must not apply the trace_id shortcut, or a message whose key is in and
    whose trace_id is out is silently dropped."""
    intake, _ = intake_for(sampling={"key": "message_key", "rate": 0.01})
    record = RawRecord("traces", 0, 0, dump_json({"trace_id": out_key(0.01), "output": "a"}),
                       key=b"kafka-key")
    decoded = intake.decode(record, presampled=True)
    assert decoded is not SAMPLED_OUT
    assert [e.trace_id for e in decoded.events] == [out_key(0.01)]
    # Without the key's decision (a keyless message), the trace id decides as usual.
    assert intake.decode(record) is SAMPLED_OUT


def test_a_decoder_failure_becomes_a_decoder_error_dead_letter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a decoder bug")

    intake, _ = intake_for()
    monkeypatch.setattr(FlatJsonDecoder, "decode", broken)
    with pytest.raises(DecodeError) as info:
        intake.decode(raw(0))
    assert info.value.reason == "decoder_error"
    assert "RuntimeError" in str(info.value)


# --- flat_json: the sampling probe and the full decoder -----------------------------------

IDS = {"event_id": "e1", "trace_id": "t1"}

#: Messages the full decoder dead-letters whatever sampling says. Each carries ids, so a
#: probe that refused them only for want of a sampling key would not pass.
DEAD_LETTERS: list[dict[str, Any]] = [
    {"input": "no output"},
    {"output": 1},
    *({"output": "a", name: 5} for name in ("span_id", "session_id", "app", "system_prompt",
                                             "input", "reference")),
    {"output": "a", "messages": 5},
    {"output": "a", "messages": "not a list"},
    {"output": "a", "messages": ["not a turn"]},
    {"output": "a", "messages": [{"role": "user", "content": 5}]},
    {"output": "a", "messages": [{"role": 5, "content": "q"}]},
    {"output": "a", "messages": [{"content": "q"}]},
    {"output": "a", "context": [1]},
    {"output": "a", "context": 5},
    {"output": "a", "attributes": ["k"]},
    {"output": "a", "attributes": {"k": ["v"]}},
    {"output": "a", "timestamp": True},
    {"output": "a", "timestamp": ["2026"]},
]


@pytest.mark.parametrize("obj", DEAD_LETTERS)
def test_a_dead_letter_is_never_sampled_out(obj: dict[str, Any]) -> None:
    """The probe must decline (the full path dead-letters), and the full path must
    dead-letter even when sampling would leave the event out: a malformed message is a
    dead letter at any rate, never a silent ``sampling`` skip."""
    decoder = make_decoder(InputTopic(topic="traces"))
    value = dump_json({**IDS, **obj})
    for key in ("trace_id", "event_id"):
        probe = sampling_probe(decoder, key)
        assert probe is not None
        assert probe(value) is None
    with pytest.raises(DecodeError) as info:
        decoder.decode(RawRecord("traces", 0, 0, value), keep=lambda _: False)
    assert info.value.reason in ("invalid_field", "missing_output")


def test_a_sampled_out_message_counts_one_sampling_skip() -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    decoded = decoder.decode(RawRecord("traces", 0, 0, dump_json({**IDS, "output": "a"})),
                             keep=lambda _: False)
    assert decoded.events == []
    assert decoded.skipped == {"sampling": 1}


def test_only_the_final_turn_is_the_answer() -> None:
    """A conversation whose last turn is the user's has no answer yet: an earlier
    assistant turn must not be judged as the output."""
    decoder = make_decoder(InputTopic(topic="traces"))
    turns = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
             {"role": "user", "content": "q2"}]
    with pytest.raises(DecodeError) as info:
        decoder(RawRecord("traces", 0, 0, dump_json({**IDS, "messages": turns})))
    assert info.value.reason == "missing_output"
    (event,) = decoder(RawRecord("traces", 0, 1, dump_json(
        {**IDS, "messages": [*turns, {"role": "assistant", "content": "a2"}]}))).events
    assert (event.input, event.output) == ("q2", "a2")


def test_content_parts_are_read_only_when_all_are_text() -> None:
    """A message with an image part is not judged on its text alone."""
    decoder = make_decoder(InputTopic(topic="traces"))
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u"}}]
    for content in (parts, []):
        with pytest.raises(DecodeError) as info:
            decoder(RawRecord("traces", 0, 0, dump_json(
                {**IDS, "output": "a", "messages": [{"role": "user", "content": content}]})))
        assert info.value.reason == "invalid_field"
        # Says why, not only "string_type": every message of a multimodal app lands here.
        assert ("messages.0.content: string_type (a list of content parts is read only "
                "when every part is text" if content else
                "messages.0.content: string_type (an empty list") in str(info.value)
    text_only = [{"type": "text", "text": "look"}, {"type": "text", "text": "here"}]
    (event,) = decoder(RawRecord("traces", 0, 0, dump_json(
        {**IDS, "messages": [{"role": "user", "content": text_only},
                             {"role": "assistant", "content": "ok"}]}))).events
    assert event.input == "look\nhere"


def test_null_attributes_are_dropped_and_scalars_become_strings() -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    attributes = {"gone": None, "n": 1, "f": 0.5, "b": True, "s": "x"}
    (event,) = decoder(RawRecord("traces", 0, 0, dump_json(
        {**IDS, "output": "a", "attributes": attributes}))).events
    assert event.attributes == {"n": "1", "f": "0.5", "b": "true", "s": "x"}


@pytest.mark.parametrize("path", ["meta.1.trace", "meta.x.trace", "meta.0.trace.deeper",
                                  "label.0", "label.trace"])
def test_a_mapped_path_that_leads_nowhere_leaves_the_field_unset(path: str) -> None:
    """A path past the end of a list, through a string or a non-index on a list finds
    nothing (the field takes its default); it must neither crash nor read a wrong value."""
    decoder = make_decoder(InputTopic(topic="traces", mapping={"trace_id": path}))
    value = dump_json({"event_id": "e1", "output": "a", "label": "plain",
                       "meta": [{"trace": "t0"}]})
    (event,) = decoder(RawRecord("traces", 0, 0, value)).events
    assert event.trace_id == "e1"  # the default: the event id
    mapped = make_decoder(InputTopic(topic="traces", mapping={"trace_id": "meta.0.trace"}))
    assert mapped(RawRecord("traces", 0, 0, value)).events[0].trace_id == "t0"


@pytest.mark.parametrize("value", [
    b'{"event_id": "e1", "trace_id": "t1", "output": "a", "other": {"x": "caf\xe9"}}',
    b'{"event_id": "e1", "trace_id": "t1", "output": "a", "o": "\xed\xa0\x80"}',
])
def test_invalid_utf8_in_an_unread_key_is_a_dead_letter_not_a_sampling_skip(
        value: bytes) -> None:
    """msgspec skips unknown keys unchecked; orjson (the full decoder) rejects them, so
    the probe must decline such a message although it has a valid sampling key."""
    decoder = make_decoder(InputTopic(topic="traces"))
    probe = sampling_probe(decoder, "trace_id")
    assert probe is not None
    assert probe(value) is None
    with pytest.raises(DecodeError) as info:
        decoder.decode(RawRecord("traces", 0, 0, value), keep=lambda _: False)
    assert info.value.reason == "invalid_utf8"


def test_an_empty_event_id_is_replaced_by_the_position_hash() -> None:
    """Results are keyed by event id: an empty one would make every such message's
    results collide; the position hash is also stable across redelivery."""
    decoder = make_decoder(InputTopic(topic="traces"))
    ids = set()
    for offset in (0, 1):
        value = dump_json({"event_id": "", "output": "a"})
        (event,) = decoder(RawRecord("traces", 0, offset, value)).events
        (again,) = decoder(RawRecord("traces", 0, offset, value)).events
        assert event.event_id == again.event_id == stable_hash("traces", 0, offset)
        assert event.trace_id == event.event_id
        ids.add(event.event_id)
    assert len(ids) == 2
