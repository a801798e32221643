"""Sampling on the Kafka message key (``sampling.key: message_key``): decided before
decoding, the same decisions as trace_id sampling when the key is the trace id, and every
message still ends as a result, a counted skip or a dead letter."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog.testing
from prometheus_client import CollectorRegistry

from evalstream.app.intake import Intake
from evalstream.app.offsets import OffsetTracker
from evalstream.app.pipeline import Pipeline
from evalstream.app.worker import Worker
from evalstream.config import SamplingSettings
from evalstream.events import RawRecord, Record, TraceEvent, dump_json
from evalstream.metrics import Metrics
from evalstream.sampling import Sampler
from evalstream.sinks.memory import MemorySink
from evalstream.sources.base import TP
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES, settings

TRACE_IDS = [f"{(i * 0x9E3779B97F4A7C15) % (1 << 128):032x}" for i in range(3000)]


def test_key_bytes_hash_like_the_utf8_trace_id() -> None:
    for salt in ("", "2026", "é"):
        by_key = Sampler(SamplingSettings(key="message_key", salt=salt))
        by_trace = Sampler(SamplingSettings(key="trace_id", salt=salt))
        for trace_id in [*TRACE_IDS[:200], "trace-ü-1", "x"]:
            event = TraceEvent(event_id="e", trace_id=trace_id)
            assert by_key.fraction_of_bytes(trace_id.encode()) == by_trace.fraction(event)
            # Events of keyless messages are sampled on their trace_id.
            assert by_key.fraction(event) == by_trace.fraction(event)
    assert Sampler(SamplingSettings(key="message_key")).key == "trace_id"
    assert Sampler(SamplingSettings(key="message_key")).by_message_key
    assert not Sampler(SamplingSettings()).by_message_key


def test_salt_changes_the_key_hash_and_separates_salt_from_key() -> None:
    plain = Sampler(SamplingSettings(key="message_key"))
    salted = Sampler(SamplingSettings(key="message_key", salt="a"))
    assert plain.fraction_of_bytes(b"bc") != salted.fraction_of_bytes(b"bc")
    assert (Sampler(SamplingSettings(salt="ab")).fraction_of("c")
            != salted.fraction_of("bc"))


def intake_for(**sections: Any) -> Intake:
    s = settings(**sections)
    metrics = Metrics(CollectorRegistry())
    return Intake(s, Pipeline(s, JUDGES, metrics), metrics)


def test_key_limit_agrees_exactly_with_the_fraction_test() -> None:
    assert intake_for().key_limit is None  # event-key sampling: no decision on the key
    routes = [{"name": "a", "sample_rate": 0.5, "match": {"requires": ["output"]},
               "evaluators": [{"evaluator": "unit_scripted"}]},
              {"name": "b", "sample_rate": 0.2, "evaluators": [{"evaluator": "unit_scripted"}]}]
    for salt in ("", "s"):
        sampling = {"key": "message_key", "rate": 0.3, "salt": salt}
        intake = intake_for(sampling=sampling, routes=routes)
        sampler = Sampler(SamplingSettings(**sampling))
        assert intake.key_limit is not None
        keys = [t.encode() for t in TRACE_IDS]
        for key in keys:
            fast = intake.key_hash(key) < intake.key_limit
            # The highest route rate: 0.3 x 0.5.
            assert fast == sampler.sampled(sampler.fraction_of_bytes(key), 0.15)
        kept = sum(intake.key_hash(k) < intake.key_limit for k in keys)
        assert 0.11 * len(keys) < kept < 0.19 * len(keys)


def test_advance_completes_a_run_of_skipped_offsets_in_one_step() -> None:
    tp = ("traces", 0)
    t = OffsetTracker()
    t.assign([tp])
    t.advance(tp, 10)
    assert t.committable() == {tp: 10}
    state = t.track(tp, 12, 1)
    assert state is not None
    t.advance(tp, 20)
    assert t.committable() == {tp: 12}  # 12 is still running
    t.advance(tp, 5)  # never moves back
    t.done(state, 12)
    assert t.committable() == {tp: 20}
    t.advance(("other", 0), 3)  # unassigned: ignored
    assert t.committable() == {tp: 20}


def keyed(partition: int, offset: int, trace_id: str | None, value: bytes | None,
          key: bytes | None = None) -> RawRecord:
    if key is None and trace_id is not None:
        key = trace_id.encode()
    return RawRecord("traces", partition, offset, value, key)


def body(i: int, trace_id: str, output: str = "ok") -> bytes:
    return dump_json({"event_id": f"e{i}", "trace_id": trace_id, "output": output})


async def run_worker(records: list[RawRecord], **sections: Any) -> tuple[Worker, MemorySource,
                                                                         MemorySink]:
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(**sections), registry=CollectorRegistry(), judges=JUDGES,
                    source=source, sink=sink)
    ends: dict[tuple[str, int], int] = {}
    for r in records:
        ends[(r.topic, r.partition)] = max(ends.get((r.topic, r.partition), 0), r.offset + 1)
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    try:
        async with asyncio.timeout(10):
            while source.committed != ends:
                await asyncio.sleep(0.005)
    finally:
        worker.request_stop()
        assert await asyncio.wait_for(asyncio.shield(task), 15) == 0
    return worker, source, sink


def metric(worker: Worker, name: str, **labels: str) -> float:
    return worker.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_key_sampling_matches_trace_id_sampling_and_never_decodes_skips() -> None:
    rate = 0.2
    sampler = Sampler(SamplingSettings(rate=rate))
    chosen = {t for t in TRACE_IDS[:400]
              if sampler.sampled(sampler.fraction(TraceEvent(event_id="x", trace_id=t)), rate)}
    records: list[RawRecord] = []
    offsets = [0, 0]
    expected_dead: set[tuple[int, int]] = set()
    for i, trace_id in enumerate(TRACE_IDS[:400]):
        p = i % 2
        if i % 25 == 3:
            # Malformed: a dead letter only when its key is sampled (else never examined).
            records.append(keyed(p, offsets[p], trace_id, b"{not json"))
            if trace_id in chosen:
                expected_dead.add((p, offsets[p]))
        else:
            records.append(keyed(p, offsets[p], trace_id, body(i, trace_id)))
        offsets[p] += 1
    # Keyless and empty-keyed messages fall back to decoding and trace_id sampling.
    fallback = TRACE_IDS[400:440]
    for j, trace_id in enumerate(fallback):
        key = b"" if j % 2 else None
        records.append(RawRecord("traces", 1, offsets[1], body(1000 + j, trace_id), key))
        offsets[1] += 1
    records.append(RawRecord("traces", 1, offsets[1], b"[1]", None))  # keyless, malformed
    expected_dead.add((1, offsets[1]))
    offsets[1] += 1
    records.sort(key=lambda r: (r.partition, r.offset))

    worker, _, sink = await run_worker(records, sampling={"key": "message_key", "rate": rate})

    valid = {f"e{i}": t for i, t in enumerate(TRACE_IDS[:400]) if i % 25 != 3}
    valid.update({f"e{1000 + j}": t for j, t in enumerate(fallback)})
    expected = {e for e, t in valid.items()
                if sampler.sampled(sampler.fraction(TraceEvent(event_id=e, trace_id=t)), rate)}
    assert 40 < len(expected) < 130
    assert {r.event_id for r in sink.results} == expected
    assert all(r.sample_rate == rate for r in sink.results)
    assert {(d.record.partition, d.record.offset) for d in sink.dead_letters} == expected_dead
    skipped = metric(worker, "evalstream_events_skipped_total", reason="sampling")
    assert len(sink.results) + len(sink.dead_letters) + skipped == len(records)
    assert metric(worker, "evalstream_messages_consumed_total", topic="traces") == len(records)
    # Only the sampled keyed messages and the (valid) keyless ones were decoded.
    keyed_decoded = sum(1 for i, t in enumerate(TRACE_IDS[:400]) if i % 25 != 3 and t in chosen)
    assert (metric(worker, "evalstream_events_decoded_total", format="flat_json")
            == keyed_decoded + len(fallback))


async def test_route_rates_nest_under_key_sampling() -> None:
    routes = [{"name": "half", "sample_rate": 0.5, "match": {"app": ["a"]},
               "evaluators": [{"evaluator": "unit_scripted"}]},
              {"name": "all", "evaluators": [{"evaluator": "unit_scripted"}]}]
    records = [RawRecord("traces", 0, i, dump_json(
        {"event_id": f"e{i}", "trace_id": t, "output": "ok", "app": "a" if i % 2 else "b"}),
        t.encode()) for i, t in enumerate(TRACE_IDS[:600])]
    results: dict[str, set[str]] = {}
    for key in ("trace_id", "message_key"):
        _, _, sink = await run_worker(records, routes=routes,
                                      sampling={"key": key, "rate": 0.4})
        results[key] = {f"{r.route}:{r.event_id}" for r in sink.results}
    assert results["trace_id"] == results["message_key"]
    halves = {r for r in results["message_key"] if r.startswith("half:")}
    alls = {r for r in results["message_key"] if r.startswith("all:")}
    assert halves
    assert len(halves) < len(alls)


class TrickleSource(MemorySource):
    """Hands out a few records per poll, so batches end mid-partition and span partitions."""

    async def poll(self, timeout_s: float, max_records: int) -> dict[TP, list[Record]]:
        return await super().poll(timeout_s, min(max_records, 7))


async def test_partial_partition_batches_still_commit_to_the_end() -> None:
    records = [RawRecord("traces", i % 3, i // 3, body(i, t), t.encode())
               for i, t in enumerate(TRACE_IDS[:300])]
    for key in ("trace_id", "message_key"):
        source, sink = TrickleSource(records), MemorySink()
        worker = Worker(settings(sampling={"key": key, "rate": 0.1}),
                        registry=CollectorRegistry(), judges=JUDGES, source=source, sink=sink)
        ready = asyncio.Event()
        task = asyncio.create_task(worker.run(ready))
        await asyncio.wait_for(ready.wait(), 5)
        try:
            async with asyncio.timeout(10):
                while source.committed != {("traces", p): 100 for p in range(3)}:
                    await asyncio.sleep(0.005)
        finally:
            worker.request_stop()
            await asyncio.wait_for(asyncio.shield(task), 15)
        skipped = metric(worker, "evalstream_events_skipped_total", reason="sampling")
        assert 0 < len(sink.results) < 80
        assert len(sink.results) + skipped == 300


async def test_a_high_rate_stratum_is_not_skipped_before_decoding() -> None:
    # The route samples its default at 1%, one tenant at 100%: the pre-decode skips (the
    # message-key limit; the flat_json probe and decoder shortcut under trace_id) must use
    # the highest stratum rate, or that tenant's events would be skipped unread.
    routes = [{"name": "r", "sample_rate": 0.01,
               "strata": {"by": "tenant", "rates": {"tiny-co": 1.0}},
               "evaluators": [{"evaluator": "unit_scripted"}]}]
    records = [RawRecord("traces", 0, i, dump_json(
        {"event_id": f"e{i}", "trace_id": t, "output": "ok",
         "attributes": {"tenant": "tiny-co" if i % 3 == 0 else "acme"}}), t.encode())
        for i, t in enumerate(TRACE_IDS[:300])]
    tiny = {f"e{i}" for i in range(0, 300, 3)}
    for key in ("trace_id", "message_key"):
        worker, _, sink = await run_worker(records, routes=routes, sampling={"key": key})
        by_rate: dict[float, set[str]] = {}
        for r in sink.results:
            by_rate.setdefault(r.sample_rate, set()).add(r.event_id)
        assert by_rate.pop(1.0) == tiny, key
        assert set(by_rate) <= {0.01}, key  # the other tenant at the route's rate
        assert not by_rate.get(0.01, set()) & tiny
        assert metric(worker, "evalstream_events_skipped_total", reason="sampling") == (
            len(records) - len(sink.results))


async def test_a_key_that_is_not_the_trace_id_is_said_once() -> None:
    # Producers keying by tenant or app (not by trace id) make every message of a key share
    # one fraction: with message_key sampling a tenant is then evaluated entirely or never,
    # and the Wilson bounds (which assume independent draws) are far too narrow. Only the
    # traffic can tell, so the worker says it once, naming no key or id.
    tenant_keyed = [RawRecord("traces", 0, i, body(i, t), b"tenant-acme")
                    for i, t in enumerate(TRACE_IDS[:50])]
    with structlog.testing.capture_logs() as logs:
        await run_worker(tenant_keyed, sampling={"key": "message_key", "rate": 1.0})
    said = [e for e in logs if e["event"] == "sampling_key_not_trace_id"]
    assert len(said) == 1
    assert "tenant-acme" not in str(said[0])
    trace_keyed = [keyed(0, i, t, body(i, t)) for i, t in enumerate(TRACE_IDS[:50])]
    with structlog.testing.capture_logs() as logs:
        await run_worker(trace_keyed, sampling={"key": "message_key", "rate": 1.0})
    assert not [e for e in logs if e["event"] == "sampling_key_not_trace_id"]
