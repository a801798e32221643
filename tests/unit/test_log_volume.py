"""Log volume stays bounded under a flood of bad input: one line per bad message (at tens
of thousands of messages a second) would drown the log pipeline and bill for it. The
counters still count every one; the lines that go out say how many were left out."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import RawRecord
from evalstream.logging import LogLimit, LogLimits
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.support.clock import FakeClock
from tests.unit.pipeline_doubles import JUDGES, raw, settings

_FLOOD = 2_000


def _worker(records: list[RawRecord]) -> tuple[Worker, MemorySource, MemorySink]:
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink)
    return worker, source, sink


async def _run_until(worker: Worker, done: Any) -> None:
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    try:
        async with asyncio.timeout(30):
            while not done():
                await asyncio.sleep(0.01)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 15)


def _lines(logs: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry["event"] == event]


async def test_a_flood_of_bad_messages_logs_a_bounded_number_of_lines() -> None:
    records = [RawRecord("traces", 0, i, b"{oops") for i in range(_FLOOD)]
    worker, source, sink = _worker(records)
    with structlog.testing.capture_logs() as logs:
        await _run_until(worker, lambda: source.committed.get(("traces", 0)) == _FLOOD)
    assert len(sink.dead_letters) == _FLOOD
    registry = worker.metrics.registry
    assert registry.get_sample_value("evalstream_dead_letters_total",
                                     {"reason": "invalid_json"}) == _FLOOD
    lines = _lines(logs, "dead_letter")
    assert 1 <= len(lines) <= 20, len(lines)  # was one per message
    # Each line still says where and why; later ones how many were left out before them.
    assert lines[0]["reason"] == "invalid_json"
    assert sum(line.get("suppressed", 0) for line in lines) <= _FLOOD - len(lines)


async def test_a_rare_reason_is_not_hidden_by_a_flood_of_another() -> None:
    records = [RawRecord("traces", 0, i, b"{oops") for i in range(_FLOOD)]
    records.append(RawRecord("traces", 0, _FLOOD, b"[]"))
    worker, source, _ = _worker(records)
    with structlog.testing.capture_logs() as logs:
        await _run_until(worker, lambda: source.committed.get(("traces", 0)) == _FLOOD + 1)
    assert any(line["reason"] == "not_an_object" for line in _lines(logs, "dead_letter"))


async def test_an_evaluator_failing_on_every_event_logs_a_bounded_number_of_lines() -> None:
    records = [raw(i, "boom") for i in range(_FLOOD // 4)]
    worker, _, sink = _worker(records)
    with structlog.testing.capture_logs() as logs:
        await _run_until(worker, lambda: len(sink.results) == len(records))
    # Some lines (none would pass too), and the counter still counts every failure.
    assert 1 <= len(_lines(logs, "evaluator_failed")) <= 20
    assert worker.metrics.registry.get_sample_value("evalstream_evaluations_total", {
        "route": "main", "evaluator": "unit_scripted", "outcome": "error"}) == len(records)


def test_log_limit_lets_a_burst_through_then_one_line_per_interval() -> None:
    clock = FakeClock(100.0)
    limit = LogLimit(burst=3, interval_s=1.0, clock=clock)
    assert [limit.take() for _ in range(5)] == [0, 0, 0, None, None]
    clock.now += 1.0
    assert limit.take() == 2  # the line that goes out says how many were left out
    assert limit.take() is None
    clock.now += 10.0  # quiet: the burst is back, no more than it
    assert [limit.take() for _ in range(4)] == [1, 0, 0, None]


def test_log_limits_give_each_key_its_own_burst_and_say_what_was_left_out() -> None:
    clock = FakeClock(100.0)
    limits: LogLimits[str] = LogLimits(clock=clock)
    assert [limits.fields("flood") for _ in range(11)] == [{}] * 10 + [None]
    assert limits.fields("rare") == {}  # a flood of one key hides no other
    clock.now += 1.0
    assert limits.fields("flood") == {"suppressed": 1}


class _BrokenObserver:
    def observe(self, result: Any) -> None:
        raise RuntimeError("bug")

    async def run(self, publish_alert: Any, stop: asyncio.Event) -> None:
        await stop.wait()


async def test_an_observer_failing_on_every_result_logs_a_bounded_number_of_lines() -> None:
    records = [raw(i) for i in range(_FLOOD // 4)]
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink, observers=(_BrokenObserver(),))
    with structlog.testing.capture_logs() as logs:
        await _run_until(worker, lambda: len(sink.results) == len(records))
    assert 1 <= len(_lines(logs, "observer_failed")) <= 20


async def test_a_flood_of_invalid_labels_logs_a_bounded_number_of_lines() -> None:
    from tests.unit.test_labels_job import LAB, Job

    job = Job([], [b"{" for _ in range(_FLOOD // 4)])
    await job.source.start(job.joiner)
    with structlog.testing.capture_logs() as logs:
        await job.read()
    assert len(job.sink.dead_letters) == _FLOOD // 4
    lines = _lines(logs, "invalid_label")
    assert 1 <= len(lines) <= 20
    assert lines[0]["partition"] == 0
    assert lines[0]["topic"] == LAB


def _failures(worker: Worker, observer: str) -> float:
    return worker.metrics.registry.get_sample_value(
        "evalstream_observer_failures_total", {"observer": observer}) or 0.0


async def test_observer_failures_are_counted_as_their_lines_are_limited() -> None:
    # A drift monitor failing on every result leaves the pass-rate and drift gauges at
    # their last values: with its log lines limited, a counter is what can page on it.
    records = [raw(i) for i in range(50)]
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink, observers=(_BrokenObserver(),))
    await _run_until(worker, lambda: len(sink.results) == len(records))
    assert _failures(worker, "_BrokenObserver") == len(records)


class _CrashingRun(_BrokenObserver):
    def observe(self, result: Any) -> None:
        pass

    async def run(self, publish_alert: Any, stop: asyncio.Event) -> None:
        raise RuntimeError("bug")


async def test_an_observer_whose_run_fails_is_counted() -> None:
    source, sink = MemorySource([raw(0)]), MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink, observers=(_CrashingRun(),))
    await _run_until(worker, lambda: _failures(worker, "_CrashingRun") >= 1)


async def test_a_flood_of_otel_copies_refused_logs_a_bounded_number_of_lines() -> None:
    # A cause that refuses OTel copies (a size limit, a topic policy) refuses every one
    # until fixed: one error line per result, at the result rate.
    from aiokafka.errors import MessageSizeTooLargeError

    from tests.unit.test_otel_results import _kafka_sink, _Producer, _result

    sink = _kafka_sink(_Producer(fail={"otel": MessageSizeTooLargeError()}),
                       otel_results="otel")
    with structlog.testing.capture_logs() as logs:
        for _ in range(_FLOOD // 4):
            assert await sink.publish_result(_result()) is False  # each still given up
    lines = _lines(logs, "otel_result_rejected")
    assert 1 <= len(lines) <= 20, len(lines)


class _SizeLimitedProducer:
    """Acknowledges records up to ``limit`` bytes, refuses larger ones as the broker does."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent: list[bytes] = []

    async def send(self, topic: str, *, value: bytes, key: bytes | None,
                   headers: Any) -> asyncio.Future[None]:
        from aiokafka.errors import MessageSizeTooLargeError

        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if len(value) > self.limit:
            ack.set_exception(MessageSizeTooLargeError())
        else:
            self.sent.append(value)
            ack.set_result(None)
        return ack


async def test_a_flood_of_dead_letters_too_large_logs_a_bounded_number_of_lines() -> None:
    # Each dead_letter line is limited; the truncation line beside it was not, so a flood
    # of oversized bad messages still logged one line per message.
    from tests.unit.test_otel_results import _kafka_sink

    producer = _SizeLimitedProducer(limit=100)
    sink = _kafka_sink(producer)  # type: ignore[arg-type]
    with structlog.testing.capture_logs() as logs:
        for i in range(_FLOOD // 4):
            await sink.publish_dead_letter(RawRecord("traces", 0, i, b"x" * 1000),
                                           "invalid_json", "not JSON")
    assert producer.sent == [b""] * (_FLOOD // 4)  # each published, without its value
    lines = _lines(logs, "dead_letter_truncated")
    assert 1 <= len(lines) <= 20, len(lines)
