"""Must-show 1: every message ends as a result, a counted skip or a dead letter, and the
group's committed offsets reach the end; all on the real broker with the real refusal
evaluator and the builtin judge."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import dump_json
from tests.integration.workerkit import (
    REPO,
    Topics,
    committed,
    event_json,
    expected_sampled,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

PARTITIONS = 4
SCHEMA = REPO / "schemas" / "eval_result.schema.json"


def malformed() -> list[tuple[str, bytes | None]]:
    """60 bad messages: (expected reason, value)."""
    bad: list[tuple[str, bytes | None]] = []
    bad += [("invalid_json", b'{"output": "unterminated'), ("invalid_json", b"{,}"),
            ("invalid_json", b"not json at all"), ("invalid_json", b'{"a": 1,}'),
            ("invalid_json", b"{'single': 'quotes'}")] * 2
    bad += [("not_an_object", v) for v in (b"[1, 2, 3]", b'"just a string"', b"42", b"null",
                                           b"true")] * 2
    bad += [("invalid_field", dump_json(v)) for v in (
        {"output": 123}, {"output": "ok", "messages": "not a list"},
        {"output": "ok", "attributes": {"nested": {"a": 1}}}, {"output": ["a", "b"]},
        {"output": "ok", "messages": [{"role": "user", "content": 5}]})] * 2
    bad += [("missing_output", dump_json(v)) for v in (
        {"input": "hi"}, {"trace_id": "x"}, {"output": None, "input": "q"}, {},
        {"messages": [{"role": "user", "content": "hello"}]})] * 2
    bad += [("invalid_utf8", v) for v in (b'{"output": "caf\xe9"}', b"\xff\xfe\xfd",
                                          b'{"output": "\xc3\x28"}', b"\x80abc",
                                          b'{"input": "\xed\xa0\x80"}')] * 2
    bad += [("too_large", dump_json({"output": "x" * (2 * 1024 * 1024)}))]
    bad += [("empty", b"")] * 5 + [("empty", None)] * 4
    assert len(bad) == 60
    return bad


async def test_every_message_is_a_result_a_skip_or_a_dead_letter(broker: Broker) -> None:
    topics = Topics.fresh("delivery")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(broker.bootstrap, topics, sampling={"rate": 0.5})

    rng = random.Random(7)
    valid_ids = [f"e{i}" for i in range(940)]
    messages: list[tuple[str | None, bytes | None]] = [
        (None, event_json(i, refuse=i % 10 == 0)) for i in range(940)]
    messages += [(reason, value) for reason, value in malformed()]
    rng.shuffle(messages)
    ends = await produce(broker.bootstrap, topics.inputs, [v for _, v in messages],
                         keys=[str(i).encode() for i in range(len(messages))])
    assert sum(ends.values()) == 1000

    sampled = expected_sampled(settings, valid_ids)
    assert 300 < len(sampled) < 640  # both paths are exercised

    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)
    async with running(worker):
        await wait_for(lambda: _reached(broker, topics, ends), timeout=60,
                       what="committed offsets to reach the end")

        def caught_up() -> bool:  # lag comes from fetch high watermarks
            lags = [registry.get_sample_value("evalstream_consumer_lag_messages",
                                              {"topic": topics.inputs, "partition": str(p)})
                    for p in range(PARTITIONS)]
            return all(lag == 0 for lag in lags)
        await wait_for(caught_up, timeout=10, what="consumer lag gauges to reach 0")
        peak = worker.in_flight_peak

    published = await results(broker.bootstrap, topics.results, expect=len(sampled))
    by_event: dict[str, list[dict[str, object]]] = {}
    for result in published:
        by_event.setdefault(str(result["event_id"]), []).append(result)
    assert set(by_event) == sampled
    assert all(len(v) == 1 for v in by_event.values())
    refused = {f"e{i}" for i in range(0, 940, 10)} & sampled
    # Real worker output validates against the committed JSON Schema.
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8")))
    for result in published:
        body = {k: v for k, v in result.items() if not k.startswith("_")}
        errors = [e.message for e in validator.iter_errors(body)]
        assert not errors, errors
    for event_id, (result,) in by_event.items():
        assert result["evaluator"] == "refusal"
        assert result["evaluator_version"] == "1"
        assert result["status"] == "ok"
        assert result["sample_rate"] == 0.5
        assert result["_headers"]["evaluator"] == b"refusal"
        assert result["_key"] == f"trace-{event_id[1:]}".encode()
        assert result["passed"] is (event_id not in refused), event_id

    skipped = registry.get_sample_value("evalstream_events_skipped_total",
                                        {"reason": "sampling"})
    assert skipped == 940 - len(sampled)

    dead = await read_all(broker.bootstrap, topics.dead_letter, expect=60, timeout=30)
    assert len(dead) == 60
    expected_reasons: dict[str, int] = {}
    for reason, _ in malformed():
        expected_reasons[reason] = expected_reasons.get(reason, 0) + 1
    got_reasons: dict[str, int] = {}
    sent = {i: v for i, (reason, v) in enumerate(messages) if reason is not None}
    for record in dead:
        headers = dict(record.headers)  # type: ignore[attr-defined]
        reason = headers["reason"].decode()
        got_reasons[reason] = got_reasons.get(reason, 0) + 1
        assert headers["source_topic"].decode() == topics.inputs
        assert int(headers["source_offset"]) >= 0
        key = int(record.key)  # type: ignore[attr-defined]
        original = sent[key]
        assert record.value == (original or b"")  # type: ignore[attr-defined]
    assert got_reasons == expected_reasons
    assert registry.get_sample_value("evalstream_dead_letters_total", {"reason": "too_large"}) == 1
    assert peak <= settings.worker.max_in_flight


async def _reached(broker: Broker, topics: Topics, ends: dict[int, int]) -> bool:
    got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
    return all(got.get(p, 0) >= end for p, end in ends.items())
