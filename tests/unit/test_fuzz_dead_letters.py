"""Property: dead-letter and result headers are bytes, bounded and valid UTF-8 whatever the
reason and error text (lone surrogates, NUL, multi-byte characters cut at the bound, huge
texts), and the message's own headers travel unchanged but cannot forge ours.

A header that fails to build stops the worker (``DeadLetters._publish`` treats any error
as a sink failure), and one that is not UTF-8 breaks consumers that read headers as text.
"""

from __future__ import annotations

import asyncio
import json

from aiokafka.errors import MessageSizeTooLargeError
from hypothesis import given, settings
from hypothesis import strategies as st

from evalstream.config import KafkaSettings, TopicSettings
from evalstream.errors import DecodeError, OutputRejectedError
from evalstream.events import EvalResult, RawRecord, dump_json
from evalstream.sinks.headers import (
    DLQ_ERROR,
    DLQ_OFFSET,
    DLQ_PARTITION,
    DLQ_REASON,
    DLQ_TOPIC,
    DLQ_TRUNCATED,
    dead_letter_headers,
    result_headers,
)
from evalstream.sinks.kafka import KafkaSink
from evalstream.sinks.memory import MemorySink
from tests.support.fuzz import FUZZ, adversarial_text, json_bytes

#: What one of our header values may take at most (the error text is cut to 1,000 bytes).
MAX_VALUE_BYTES = 1_000
OURS = {DLQ_REASON, DLQ_ERROR, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET}

texts = st.one_of(adversarial_text,
                  # Multi-byte characters that straddle the byte bound in every alignment.
                  st.builds(lambda pad, ch, n: "x" * pad + ch * n, st.integers(0, 3),
                            st.sampled_from(["é", "€", "\U0001f600", "\ud800"]),
                            st.integers(240, 1100)))
original_headers = st.lists(st.tuples(
    st.one_of(st.sampled_from([*sorted(OURS), "traceparent", "truncated_size"]),
              st.text(max_size=10)),
    st.binary(max_size=20)), max_size=5).map(tuple)


def check_ours(headers: list[tuple[str, bytes]], count: int) -> None:
    for name, value in headers[:count]:
        assert isinstance(name, str)
        assert isinstance(value, bytes)
        assert len(value) <= MAX_VALUE_BYTES, (name, len(value))
        value.decode("utf-8")  # raises if a cut split a character


@FUZZ
@given(reason=texts, error=texts, extra=original_headers,
       partition=st.integers(0, 2**31 - 1), offset=st.integers(0, 2**63 - 1))
def test_dead_letter_headers_are_bounded_utf8(reason: str, error: str,
                                              extra: tuple[tuple[str, bytes], ...],
                                              partition: int, offset: int) -> None:
    record = RawRecord("traces", partition, offset, b"\xff", headers=extra)
    headers = dead_letter_headers(record, reason, error)
    check_ours(headers, len(OURS))
    names = [name for name, _ in headers]
    assert names[:len(OURS)] == [DLQ_REASON, DLQ_ERROR, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET]
    assert all(names.count(n) == 1 for n in OURS)
    # The message's own headers follow unchanged, except those that would forge ours.
    assert headers[len(OURS):] == [h for h in extra if h[0] not in OURS | {"truncated_size"}]
    assert dict(headers)[DLQ_OFFSET] == str(offset).encode()


@FUZZ
@given(route=texts.filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
       evaluator=st.text(max_size=30))
def test_result_headers_are_utf8(route: str, evaluator: str) -> None:
    # Route and evaluator names come from the config, not from content: not bounded here.
    for name, value in result_headers(route, evaluator):
        assert isinstance(name, str)
        assert isinstance(value, bytes)
        value.decode("utf-8")


class _Producer:
    """Acknowledges every send at once and keeps what was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]] = []

    async def send(self, topic: str, *, value: bytes, key: bytes | None,
                   headers: list[tuple[str, bytes]]) -> asyncio.Future[None]:
        self.sent.append((topic, value, key, headers))
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ack.set_result(None)
        return ack


@FUZZ
@given(reason=texts, error=texts, value=st.one_of(st.none(), st.binary(max_size=50)),
       key=st.one_of(st.none(), st.binary(max_size=10)), extra=original_headers)
def test_dead_letter_publish_keeps_the_message(reason: str, error: str, value: bytes | None,
                                               key: bytes | None,
                                               extra: tuple[tuple[str, bytes], ...]) -> None:
    """Through the Kafka sink (on a recording producer): one record on the dead-letter
    topic, the original bytes and key as they were, our headers valid."""
    producer = _Producer()
    sink = KafkaSink(KafkaSettings(), TopicSettings(dead_letter="dlq"))
    sink._producer = producer  # type: ignore[assignment]
    record = RawRecord("traces", 1, 5, value, key=key, headers=extra)
    asyncio.run(sink.publish_dead_letter(record, reason, error))
    ((topic, sent, sent_key, headers),) = producer.sent
    assert (topic, sent, sent_key) == ("dlq", value or b"", key)
    check_ours(headers, len(OURS))


def test_error_cut_inside_a_multibyte_character_stays_utf8() -> None:
    headers = dict(dead_letter_headers(RawRecord("t", 0, 0, b""), "invalid_json", "€" * 400))
    assert headers[DLQ_ERROR].decode("utf-8") == "€" * 333  # 999 bytes: the whole ones


def test_reason_with_a_lone_surrogate_does_not_raise() -> None:
    headers = dict(dead_letter_headers(RawRecord("t", 0, 0, b""), "bad\ud800", "x\udfff"))
    assert headers[DLQ_REASON] == b"bad?"
    assert headers[DLQ_ERROR] == b"x?"


def test_a_huge_reason_is_bounded() -> None:
    exc = DecodeError("r" * 5000, "message")
    headers = dict(dead_letter_headers(RawRecord("t", 0, 0, b""), exc.reason, str(exc)))
    assert len(headers[DLQ_REASON]) <= MAX_VALUE_BYTES


# --- end to end: the worker loses no message, whatever the batch holds ----------------------

OUTPUTS = ("ok", "skip", "fail", "boom", "judge_error", "bad_score", "opaque", "sleep:0",
           "skip:Not A Code \ud7ff", "")
FLAT_REASONS = {"empty", "invalid_utf8", "invalid_json", "not_an_object", "missing_output",
                "invalid_field", "too_large"}


@st.composite
def batches(draw: st.DrawFn) -> list[RawRecord]:
    records = []
    for offset in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["event", "event", "bytes", "json", "huge", "none"]))
        if kind == "event":
            body: dict[str, object] = {"event_id": f"e{offset}",
                                       "output": draw(st.sampled_from(OUTPUTS))}
            if draw(st.booleans()):
                body["attributes"] = draw(st.dictionaries(st.text(max_size=5),
                                                          st.text(max_size=5), max_size=2))
            value: bytes | None = dump_json(body)
        elif kind == "bytes":
            value = draw(st.binary(max_size=40))
        elif kind == "json":
            value = draw(json_bytes())
        elif kind == "huge":
            value = dump_json({"event_id": "x" * 60_000, "output": "ok"})
        else:
            value = None
        records.append(RawRecord("traces", 0, offset, value))
    return records


@settings(parent=FUZZ, max_examples=max(15, FUZZ.max_examples // 4))  # a worker per example
@given(records=batches())
def test_every_message_is_a_result_a_skip_or_a_dead_letter(records: list[RawRecord]) -> None:
    from tests.unit.test_worker_memory import TP0, build, started, until

    async def run() -> tuple[MemorySink, int]:
        worker, source, sink = build(records, sink=_LimitedSink(),
                                     worker={"max_message_bytes": 100_000,
                                             "commit_interval_s": 0.01})
        async with started(worker) as task:
            await until(lambda: source.committed.get(TP0) == len(records))
        return sink, await task

    sink, code = asyncio.run(run())
    assert code == 0
    dead = {d.record.offset: d.reason for d in sink.dead_letters}
    assert set(dead.values()) <= FLAT_REASONS, dead
    results = {r.event_id for r in sink.results}
    for record in records:
        body = _event(record.value)
        if body is None:
            assert record.offset in dead
        elif body["output"] not in ("skip", "skip:Not A Code \ud7ff"):
            assert record.offset in dead or body["event_id"][:1_024] in results


def _event(value: bytes | None) -> dict[str, object] | None:
    try:
        body = json.loads(value or b"")
    except ValueError:
        return None
    return body if isinstance(body, dict) and isinstance(body.get("output"), str) else None


class _LimitedSink(MemorySink):
    """Refuses results over 100 KB, as a broker's size limit does."""

    async def publish_result(self, result: EvalResult) -> bool:
        if len(dump_json(result)) > 100_000:
            raise OutputRejectedError("results refused a record: MessageSizeTooLargeError")
        return await super().publish_result(result)


class _SizeLimitedProducer(_Producer):
    """Refuses a record over ``limit`` bytes (key, value and headers), as a broker does."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    async def send(self, topic: str, *, value: bytes, key: bytes | None,
                   headers: list[tuple[str, bytes]]) -> asyncio.Future[None]:
        size = len(value) + len(key or b"") + sum(len(n) + len(v) for n, v in headers)
        if size > self.limit:
            raise MessageSizeTooLargeError()
        return await super().send(topic, value=value, key=key, headers=headers)


sizes = st.sampled_from([0, 10, 5_000, 60_000])


@FUZZ
@given(value=sizes, key=sizes, header=sizes, headers=st.integers(0, 3))
def test_a_dead_letter_too_large_for_the_broker_is_still_published(
        value: int, key: int, header: int, headers: int) -> None:
    """Whatever part of the message is large (value, key or its own headers), its dead
    letter ends on the topic: as it is, or, when refused as too large, as a small record
    that says why. A dead letter that cannot be published stops the worker, and the message
    comes back after every restart."""
    producer = _SizeLimitedProducer(limit=50_000)
    sink = KafkaSink(KafkaSettings(), TopicSettings(dead_letter="dlq"))
    sink._producer = producer  # type: ignore[assignment]
    record = RawRecord("traces", 0, 9, b"v" * value, key=b"k" * key,
                       headers=tuple((f"h{i}", b"x" * header) for i in range(headers)))
    asyncio.run(sink.publish_dead_letter(record, "too_large", "value too large"))
    ((_, sent, _, sent_headers),) = producer.sent
    names = dict(sent_headers)
    assert names[DLQ_REASON] == b"too_large"
    assert sent == record.value or (sent == b"" and DLQ_TRUNCATED in names)


def test_a_message_with_huge_headers_and_key_still_gets_its_dead_letter() -> None:
    """Before the fix the stand-in for a refused dead letter kept the message's own
    headers and key, was refused too, and the sink raised SinkError (the worker stops)."""
    producer = _SizeLimitedProducer(limit=50_000)
    sink = KafkaSink(KafkaSettings(), TopicSettings(dead_letter="dlq"))
    sink._producer = producer  # type: ignore[assignment]
    record = RawRecord("traces", 2, 7, b"{}", key=b"k" * 60_000,
                       headers=(("traceparent", b"00-abc"), ("blob", b"x" * 60_000)))
    asyncio.run(sink.publish_dead_letter(record, "missing_output", "no output"))
    ((topic, value, key, headers),) = producer.sent
    assert (topic, value, key) == ("dlq", b"", None)
    assert dict(headers) == {DLQ_REASON: b"missing_output", DLQ_ERROR: b"no output",
                             DLQ_TOPIC: b"traces", DLQ_PARTITION: b"2", DLQ_OFFSET: b"7",
                             DLQ_TRUNCATED: b"2"}
