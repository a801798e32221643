"""The worker loop on an in-memory source and sink: delivery, watermarks, backpressure,
rebalance, output failures, drain, observers, health endpoints, log context."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Hashable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry

from evalstream.app import connect as connect_module
from evalstream.app import dead_letters as dead_letters_module
from evalstream.app import message_path as message_path_module
from evalstream.app import observers as observers_module
from evalstream.app import shutdown as shutdown_module
from evalstream.app.observers import PublishAlert, RecordingObserver
from evalstream.app.worker import Worker
from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import OutputRejectedError, SourceError
from evalstream.events import Alert, EvalResult, RawRecord
from evalstream.judges.base import Judge, Judgement, JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.spend import SpendCap, SpendWindow
from evalstream.metrics import Metrics
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.support.clock import FakeClock
from tests.support.llm_server import llm_server
from tests.unit.pipeline_doubles import JUDGES, NullJudge, raw, settings

TP0 = ("traces", 0)
TP1 = ("traces", 1)


def build(records: list[RawRecord], *, sink: MemorySink | None = None,
          observers: tuple[Any, ...] = (), **sections: Any) -> tuple[Worker, MemorySource,
                                                                    MemorySink]:
    source = MemorySource(records)
    sink = sink or MemorySink()
    worker = Worker(settings(**sections), registry=CollectorRegistry(), judges=JUDGES,
                    source=source, sink=sink, observers=observers)
    return worker, source, sink


async def until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


@asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[asyncio.Task[int]]:
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    try:
        yield task
    finally:
        worker.request_stop()
        await asyncio.wait_for(asyncio.shield(task), 15)


def metric(worker: Worker, name: str, **labels: str) -> float:
    return worker.metrics.registry.get_sample_value(name, labels) or 0.0


def outcomes(worker: Worker) -> dict[str, float]:
    """The unit_scripted evaluator's outcome counts on route main."""
    return {o: metric(worker, "evalstream_evaluations_total", route="main",
                      evaluator="unit_scripted", outcome=o)
            for o in ("passed", "failed", "labelled", "error")}


async def test_every_record_is_a_result_a_skip_or_a_dead_letter() -> None:
    records = [raw(0), raw(1, "skip"), RawRecord("traces", 0, 2, b"{oops"), raw(3, "fail"),
               raw(4, "boom"), RawRecord("traces", 0, 5, b"x" * 2000), raw(6)]
    worker, source, sink = build(records, worker={"max_message_bytes": 1000,
                                                  "commit_interval_s": 0.02})
    async with started(worker):
        await until(lambda: source.committed.get(TP0) == 7)
    assert sorted(r.event_id for r in sink.results) == ["e0", "e3", "e4", "e6"]
    assert {r.event_id: r.status for r in sink.results}["e4"] == "error"
    assert sorted((d.record.offset, d.reason) for d in sink.dead_letters) == [
        (2, "invalid_json"), (5, "too_large")]
    assert metric(worker, "evalstream_events_skipped_total", reason="no_thing") == 1
    assert metric(worker, "evalstream_dead_letters_total", reason="too_large") == 1
    assert metric(worker, "evalstream_messages_consumed_total", topic="traces") == 7
    assert metric(worker, "evalstream_results_published_total", status="error") == 1


async def test_commits_wait_for_the_slowest_earlier_message() -> None:
    records = [raw(0, "sleep:0.4"), raw(1), raw(2), raw(3)]
    worker, source, sink = build(records)
    async with started(worker):
        await until(lambda: len(sink.results) == 3)
        await asyncio.sleep(0.15)  # several commit intervals pass while offset 0 runs
        assert source.committed.get(TP0, 0) == 0
        await until(lambda: source.committed.get(TP0) == 4)
    # Nothing between 0 and 4 was ever committed, although 1-3 finished long before 0.
    assert {v for commit in source.commits for v in commit.values()} <= {0, 4}


async def test_in_flight_never_exceeds_the_bound_and_intake_pauses() -> None:
    records = [raw(i, "sleep:0.02", partition=i % 2) for i in range(60)]
    worker, source, sink = build(records, worker={"max_in_flight": 5,
                                                  "commit_interval_s": 0.02})
    seen: list[int] = []
    async with started(worker):
        async def watch() -> None:
            while True:
                seen.append(worker.in_flight)
                await asyncio.sleep(0.001)
        watcher = asyncio.create_task(watch())
        await until(lambda: len(sink.results) == 60)
        watcher.cancel()
    assert max(seen) <= 5
    assert worker.in_flight_peak == 5
    assert metric(worker, "evalstream_in_flight_evaluations_peak") == 5
    assert source.pause_count >= 1
    assert metric(worker, "evalstream_backpressure_pauses_total") >= 1


async def test_revoke_finishes_in_flight_work_then_commits() -> None:
    records = [raw(0, "sleep:0.3", partition=0), raw(1, partition=1)]
    worker, source, sink = build(records)
    async with started(worker):
        await until(lambda: worker.in_flight == 1 and len(sink.results) == 1)
        await source.revoke([TP0])
        # The revoke waited for offset 0's result and committed it before letting go.
        assert [r.event_id for r in sink.results if r.event_id == "e0"] == ["e0"]
        assert source.committed[TP0] == 1
        assert not worker.tracker.is_assigned(TP0)


async def test_revoke_does_not_wait_for_work_that_never_started() -> None:
    # One slot: offset 0 runs while offset 1 is tracked and waits for the slot. After the
    # revoke, offset 1's evaluation is abandoned, not started; the revoke must return once
    # offset 0 is done instead of waiting out shutdown_timeout_s for offset 1.
    records = [raw(0, "sleep:0.3"), raw(1)]
    worker, source, sink = build(records, worker={"max_in_flight": 1, "shutdown_timeout_s": 30,
                                                  "commit_interval_s": 0.05})
    async with started(worker):
        await until(lambda: worker.in_flight == 1 and worker.tracker.pending() == 2)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 10  # was the full 15 s (session timeout / 2)
        assert source.committed[TP0] == 1  # offset 1 was not evaluated: not committed
        assert [r.event_id for r in sink.results] == ["e0"]


async def test_a_revoke_during_the_drain_does_not_wait_for_work_that_never_started() -> None:
    # A stop cancels intake while offset 1 waits for the only slot: its evaluation never
    # starts. A rebalance during the drain (a rolling upgrade: a new pod joins) must not
    # wait out its deadline (15 s: session timeout / 2) for it, holding the whole group.
    records = [raw(0, "sleep:0.5"), raw(1)]
    worker, source, sink = build(records, worker={"max_in_flight": 1, "shutdown_timeout_s": 30,
                                                  "commit_interval_s": 0.05})
    async with started(worker):
        await until(lambda: worker.in_flight == 1 and worker.tracker.pending() == 2)
        worker.request_stop()
        # Intake ended: the consume task is gone, the drain waits for offset 0.
        await until(lambda: not [t for t in asyncio.all_tasks() if t.get_name() == "consume"])
        loop = asyncio.get_running_loop()
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 5
        assert source.committed[TP0] == 1  # offset 1 never ran: redelivered, not committed
        assert [r.event_id for r in sink.results] == ["e0"]


class _SlowDeadLetters(MemorySink):
    async def publish_dead_letter(self, record: Any, reason: str, error: str) -> None:
        await asyncio.sleep(0.5)
        await super().publish_dead_letter(record, reason, error)


async def test_a_revoke_during_the_drain_does_not_wait_for_a_dead_letter_never_sent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The same for a dead letter waiting for a dead-letter slot when intake ends.
    monkeypatch.setattr(dead_letters_module, "_DEAD_LETTER_CONCURRENCY", 1)
    records = [RawRecord("traces", 0, 0, b"not json"), RawRecord("traces", 0, 1, b"nor this")]
    worker, source, sink = build(records, sink=_SlowDeadLetters(),
                                 worker={"shutdown_timeout_s": 30, "commit_interval_s": 0.05})
    async with started(worker):
        await until(lambda: worker.tracker.pending() == 2)
        worker.request_stop()
        await until(lambda: not [t for t in asyncio.all_tasks() if t.get_name() == "consume"])
        loop = asyncio.get_running_loop()
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 5
        assert source.committed[TP0] == 1
        assert [d.record.offset for d in sink.dead_letters] == [0]


class _HangingSource(MemorySource):
    """A broker that stopped answering: commits never return."""

    hang = False

    async def commit(self, offsets: Any) -> None:
        if self.hang:
            await asyncio.Event().wait()
        await super().commit(offsets)


class _HangingSink(MemorySink):
    async def flush(self) -> None:
        await asyncio.Event().wait()


class _DeadBrokerSource(_HangingSource):
    async def stop(self) -> None:
        await asyncio.Event().wait()


class _DeadBrokerSink(_HangingSink):
    async def stop(self) -> None:
        await asyncio.Event().wait()


async def test_the_steps_after_the_drain_share_one_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Broker unreachable: flush, commit and both clients' stop all hang. Each step used
    # to wait its own timeout, which added up past the chart's grace period (drain + 15 s).
    monkeypatch.setattr(shutdown_module, "_CLOSE_BUDGET_S", 0.6)
    monkeypatch.setattr(shutdown_module, "_CLOSE_STEP_S", 0.5)
    monkeypatch.setattr(shutdown_module, "_CLOSE_STEP_MIN_S", 0.05)
    source = _DeadBrokerSource([raw(0)])
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=_DeadBrokerSink())
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.tracker.pending() == 0 and worker.is_ready())
        source.hang = True
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        worker.request_stop()
        assert await asyncio.wait_for(task, 10) == 1  # the flush never finished
        took = loop.time() - stopped_at
    assert took < 0.6 + 6 * 0.05 + 0.4, took  # was 4 x 0.5 s: each step its own timeout
    [failed] = [e for e in logs if e["event"] == "worker_failed"]
    assert failed["error"] == "producer flush did not finish within 0.5s"  # was ""


async def test_shutdown_does_not_hang_on_a_broker_that_stopped_answering(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutdown_module, "_CLOSE_STEP_S", 0.2)
    source = _HangingSource([raw(0)])
    source.hang = True
    sink = MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink)
    with structlog.testing.capture_logs() as logs:
        async with started(worker) as task:
            await until(lambda: len(sink.results) == 1)
        assert await task == 0  # the result was durable; only the last commit timed out
    assert source.committed == {}
    assert "final_commit_timeout" in [e["event"] for e in logs]

    worker, source, _ = build([raw(0)], sink=_HangingSink())
    async with started(worker) as task:
        await until(lambda: worker.tracker.pending() == 0 and len(source.commits) > 0)
    assert await task == 1  # results not known to be flushed: not a clean exit


class _FlakyObserver(RecordingObserver):
    """Crashes on its first run, as a bug in the drift monitor would."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def run(self, publish_alert: PublishAlert, stop: asyncio.Event) -> None:
        self.runs += 1
        if self.runs == 1:
            raise RuntimeError("observer bug")
        await stop.wait()


async def test_a_crashed_observer_is_restarted_not_left_dead(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observers_module, "_BACKOFF_S", 0.01)
    observer = _FlakyObserver()
    worker, _, sink = build([raw(0)], observers=(observer,))
    with structlog.testing.capture_logs() as logs:
        async with started(worker) as task:
            await until(lambda: observer.runs == 2 and len(sink.results) == 1)
        assert await task == 0
    assert [e["event"] for e in logs].count("observer_run_failed") == 1
    assert [r.event_id for r in observer.results] == ["e0"]


class _LateBroker(MemorySource):
    """A broker that refuses the first ``refusals`` connection attempts."""

    def __init__(self, records: list[RawRecord], refusals: int) -> None:
        super().__init__(records)
        self.attempts = 0
        self.refusals = refusals

    async def start(self, handler: Any) -> None:
        self.attempts += 1
        if self.attempts <= self.refusals:
            raise SourceError("cannot connect to Kafka at 127.0.0.1:9: refused")
        await super().start(handler)


async def test_start_up_waits_for_a_broker_that_comes_up_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_module, "_CONNECT_BACKOFF_S", 0.01)
    source = _LateBroker([raw(0)], refusals=3)
    sink = MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink)
    with structlog.testing.capture_logs() as logs:
        async with started(worker) as task:
            await until(lambda: source.committed.get(TP0) == 1)
        assert await task == 0
    assert source.attempts == 4
    assert [e["event"] for e in logs].count("broker_unreachable") == 3
    assert len(sink.results) == 1


async def test_start_up_gives_up_after_connect_timeout(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connect_module, "_CONNECT_BACKOFF_S", 0.01)
    source = _LateBroker([raw(0)], refusals=10**6)
    worker = Worker(settings(kafka={"connect_timeout_s": 0.2}), registry=CollectorRegistry(),
                    judges=JUDGES, source=source, sink=MemorySink())
    assert await asyncio.wait_for(worker.run(), 10) == 1
    assert source.attempts > 1

    # A stop while still connecting ends at once, cleanly.
    source = _LateBroker([raw(0)], refusals=10**6)
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=MemorySink())
    task = asyncio.create_task(worker.run())
    await until(lambda: source.attempts >= 1)
    worker.request_stop()
    assert await asyncio.wait_for(task, 10) == 0


class _StoppedWhileConnecting(_LateBroker):
    """A connection attempt that fails after a stop was requested during it."""

    def __init__(self, records: list[RawRecord], worker_ref: list[Worker]) -> None:
        super().__init__(records, refusals=10**6)
        self._worker_ref = worker_ref

    async def start(self, handler: Any) -> None:
        self._worker_ref[0].request_stop()
        await super().start(handler)


async def test_a_stop_landing_during_a_failed_connect_attempt_exits_cleanly() -> None:
    ref: list[Worker] = []
    source = _StoppedWhileConnecting([raw(0)], ref)
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=MemorySink())
    ref.append(worker)
    assert await asyncio.wait_for(worker.run(), 10) == 0
    assert source.attempts == 1


async def test_a_stop_during_the_restart_backoff_still_gives_the_observer_its_last_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observers_module, "_BACKOFF_S", 30.0)
    observer = _FlakyObserver()
    worker, _, _ = build([raw(0)], observers=(observer,))
    async with started(worker) as task:
        await until(lambda: observer.runs == 1)
    assert await task == 0  # the stop cut the 30 s backoff short
    assert observer.runs == 2  # and the observer ran once more, with stop set


class _RefusingSink(MemorySink):
    """A broker that refuses one result for good (e.g. over its size limit)."""

    async def publish_result(self, result: EvalResult) -> bool:
        if result.event_id == "e1" and result.status == "ok":
            raise OutputRejectedError("results refused a record of 2000000 bytes: "
                                      "MessageSizeTooLargeError")
        return await super().publish_result(result)


async def test_a_result_the_broker_refuses_becomes_an_error_result_not_a_crash_loop() -> None:
    worker, source, sink = build([raw(0), raw(1), raw(2)], sink=_RefusingSink())
    async with started(worker) as task:
        await until(lambda: source.committed.get(TP0) == 3)
    assert await task == 0
    by_event = {r.event_id: r for r in sink.results}
    assert by_event["e1"].status == "error"
    assert by_event["e1"].error is not None
    assert by_event["e1"].error.startswith("result rejected: results refused a record")
    assert by_event["e0"].status == by_event["e2"].status == "ok"
    # Counted once, as published: e1's refused "passed" result is not counted beside its
    # error result, so the outcome counters add up to the results on the topic.
    assert outcomes(worker) == {"passed": 2.0, "failed": 0.0, "labelled": 0.0, "error": 1.0}


async def test_the_stand_in_for_a_refused_result_carries_its_judge_spend() -> None:
    # The refused result's judge was paid: the error result standing in for it names the
    # judge with that spend, which the cost metric counts (it had judge: null, so the spend
    # was in no result). Checked: fails without the fix.
    worker, source, sink = build([raw(0, "costly"), raw(1, "costly")], sink=_RefusingSink())
    async with started(worker) as task:
        await until(lambda: source.committed.get(TP0) == 2)
    assert await task == 0
    by_event = {r.event_id: r for r in sink.results}
    assert (by_event["e0"].status, by_event["e1"].status) == ("ok", "error")
    assert by_event["e1"].judge == by_event["e0"].judge
    assert by_event["e1"].judge is not None
    assert (by_event["e1"].judge.backend, by_event["e1"].judge.model) == ("openai", "m")
    assert metric(worker, "evalstream_evaluation_cost_usd_total", route="main",
                  evaluator="unit_scripted") == pytest.approx(0.004)


async def test_a_result_that_cannot_be_counted_is_still_published_once() -> None:
    worker, source, sink = build([raw(0), raw(1)])

    def broken_record(planned: object, result: object) -> None:
        raise RuntimeError("metrics bug")

    worker.pipeline.record = broken_record  # type: ignore[method-assign]
    with structlog.testing.capture_logs() as logs:
        async with started(worker) as task:
            await until(lambda: source.committed.get(TP0) == 2)
        assert await task == 0
    # Was published again as an error result under the same result_id.
    assert [(r.event_id, r.status) for r in sink.results] == [("e0", "ok"), ("e1", "ok")]
    assert [e["event"] for e in logs].count("result_count_failed") == 2


async def test_output_failure_stops_the_worker_without_committing() -> None:
    worker, source, _ = build([raw(0), raw(1)], sink=MemorySink(fail=True))
    ready = asyncio.Event()
    code = await asyncio.wait_for(worker.run(ready), 10)
    assert code == 1
    assert source.committed.get(TP0, 0) == 0


async def test_drain_timeout_abandons_work_uncommitted_and_exits_zero() -> None:
    worker, source, sink = build([raw(0), raw(1, "sleep:30")],
                                 worker={"shutdown_timeout_s": 0.3, "commit_interval_s": 0.02})
    async with started(worker) as task:
        await until(lambda: len(sink.results) == 1 and worker.in_flight == 1)
    assert task.result() == 0
    assert source.committed[TP0] == 1  # offset 1 was abandoned: it will be redelivered


async def test_an_evaluation_cancelled_before_it_ran_frees_its_slot_and_is_abandoned() -> None:
    # A task cancelled before its first step (at close, right after it was started) never
    # runs its coroutine's body, so nothing in it can see the cancel: its slot must still
    # be freed and its piece abandoned, each once, or a revoke waits its whole deadline for
    # work that never completes. Checked: fails without the fix (in flight 1, pending 1,
    # the revoke takes the full 3 s).
    worker, source, sink = build([raw(0)], worker={"shutdown_timeout_s": 3,
                                                   "commit_interval_s": 0.02})
    path = worker.message_path
    start = path._start
    cancelled = asyncio.Event()

    async def start_then_cancel(*args: Any) -> None:
        await start(*args)
        path.cancel()  # as a stop cancelling the tasks right after they were started
        cancelled.set()

    path._start = start_then_cancel  # type: ignore[method-assign]
    async with started(worker):
        await asyncio.wait_for(cancelled.wait(), 5)
        await until(lambda: not path._tasks)
        await asyncio.sleep(0.05)  # commit intervals: a commit must not pass it either
        assert worker.in_flight == 0  # freed exactly once (not -1)
        assert worker.tracker.pending([TP0]) == 0  # abandoned exactly once (not -1)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 2  # not the 3 s deadline
        assert source.committed.get(TP0, 0) == 0  # redelivered, never committed past
    assert sink.results == []


async def test_an_evaluation_cancelled_while_it_ran_frees_its_slot_and_is_abandoned() -> None:
    # The same cancel once the body runs: still once each (pending and in flight both 0).
    worker, source, sink = build([raw(0, "sleep:30")], worker={"shutdown_timeout_s": 3,
                                                               "commit_interval_s": 0.02})
    async with started(worker):
        await until(lambda: worker.in_flight == 1)
        worker.message_path.cancel()
        await until(lambda: not worker.message_path._tasks)
        assert worker.in_flight == 0
        assert worker.tracker.pending([TP0]) == 0
        await asyncio.sleep(0.05)
        assert source.committed.get(TP0, 0) == 0
    assert sink.results == []


class _StuckDeadLetters(MemorySink):
    async def publish_dead_letter(self, record: Any, reason: str, error: str) -> None:
        await asyncio.sleep(30)


@pytest.mark.parametrize("before_it_ran", [True, False])
async def test_a_dead_letter_cancelled_frees_its_slot_and_is_abandoned(
        before_it_ran: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # As for evaluations: a cancelled publishing task (a close, the drain's deadline) must
    # free its dead-letter slot and abandon its piece, once each, whether or not its body
    # ran. Checked: fails without the fix (pending 1 both ways; the slot kept when it never
    # ran).
    monkeypatch.setattr(dead_letters_module, "_DEAD_LETTER_CONCURRENCY", 1)
    worker, source, _ = build([RawRecord("traces", 0, 0, b"not json")],
                              sink=_StuckDeadLetters(),
                              worker={"shutdown_timeout_s": 3, "commit_interval_s": 0.02})
    path = worker.message_path
    letters = path._dead_letters
    send = letters.send
    sent = asyncio.Event()

    async def send_then_cancel(*args: Any) -> None:
        await send(*args)
        if before_it_ran:
            path.cancel()
        sent.set()

    letters.send = send_then_cancel  # type: ignore[method-assign]
    async with started(worker):
        await asyncio.wait_for(sent.wait(), 5)
        if not before_it_ran:
            await asyncio.sleep(0.02)  # it runs, stuck in the sink
            path.cancel()
        await until(lambda: not path._tasks)
        assert worker.tracker.pending([TP0]) == 0  # abandoned exactly once (not -1)
        assert letters._dl_slots._value == 1  # its one slot freed, once
        loop = asyncio.get_running_loop()
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 2  # not the 3 s deadline
        assert source.committed.get(TP0, 0) == 0  # redelivered, never committed past


async def test_observers_see_acknowledged_results_and_publish_alerts() -> None:
    class Alerting(RecordingObserver):
        async def run(self, publish_alert: PublishAlert, stop: asyncio.Event) -> None:
            await until(lambda: len(self.results) >= 2)
            await publish_alert(Alert(alert_id="a1", state="firing", route="main",
                                      evaluator="unit_scripted", kind="pass_rate_drop",
                                      first_seen=self.results[0].evaluated_at))
            await stop.wait()

    observer = Alerting()
    worker, _, sink = build([raw(0), raw(1, "fail")], observers=(observer,))
    async with started(worker):
        await until(lambda: len(sink.alerts) == 1)
    assert [r.result_id for r in observer.results] == [r.result_id for r in sink.results]
    key, alert = sink.alerts[0]
    assert key == "main/unit_scripted"
    assert alert.state == "firing"
    assert metric(worker, "evalstream_alerts_total", route="main", evaluator="unit_scripted",
                  kind="pass_rate_drop", state="firing") == 1


async def test_health_endpoints() -> None:
    worker, _, sink = build([raw(0)])
    async with started(worker):
        await until(lambda: len(sink.results) == 1)
        base = f"http://127.0.0.1:{worker.health.port}"
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{base}/healthz")).status_code == 200
            assert (await client.get(f"{base}/readyz")).text == "ready\n"
            metrics = (await client.get(f"{base}/metrics")).text
            assert 'evalstream_results_published_total{status="ok"} 1.0' in metrics
            assert "evalstream_messages_consumed_total" in metrics
            # name[] selects series (what a cheap poller asks for), as in prometheus_client.
            only = (await client.get(f"{base}/metrics", params={
                "name[]": "evalstream_results_published_total"})).text
            assert 'evalstream_results_published_total{status="ok"} 1.0' in only
            assert "evalstream_messages_consumed_total" not in only
            assert (await client.get(f"{base}/nope")).status_code == 404
            assert (await client.post(f"{base}/metrics")).status_code == 405
        worker.source.assignment = set  # type: ignore[method-assign]  # lost its partitions
        async with httpx.AsyncClient() as client:
            not_ready = await client.get(f"{base}/readyz")
            assert not_ready.status_code == 503
            # The reason, for on-call (e.g. a replica more than there are partitions).
            assert not_ready.text == "not ready: no partitions assigned\n"
        worker.request_stop()
        assert worker.not_ready() == "stopping"


async def test_evaluation_logs_carry_the_message_context() -> None:
    worker, _, sink = build([raw(5, "boom")])
    with structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with started(worker):
            await until(lambda: len(sink.results) == 1)
    (failed,) = [entry for entry in logs if entry["event"] == "evaluator_failed"]
    assert failed["topic"] == "traces"
    assert failed["partition"] == 0
    assert failed["offset"] == 5
    assert failed["event_id"] == "e5"
    assert "boom" not in str(failed)  # no content in logs by default


@pytest.mark.parametrize("bad", [b"", b"[]"])
async def test_dead_letters_keep_the_original_bytes(bad: bytes) -> None:
    worker, source, sink = build([RawRecord("traces", 0, 0, bad, key=b"k")])
    async with started(worker):
        await until(lambda: source.committed.get(TP0) == 1)
    (dead,) = sink.dead_letters
    assert dead.record.value == bad
    assert dead.record.key == b"k"


async def test_deeply_nested_message_is_a_dead_letter_not_a_crash() -> None:
    # The sampling probe runs on every message below rate 1; msgspec raises RecursionError
    # on deep nesting, which once escaped the consume loop and stopped the worker for good.
    deep = b'{"output": "x", "trace_id": "t", "z": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    worker, source, sink = build([raw(0), RawRecord("traces", 0, 1, deep), raw(2)],
                                 sampling={"rate": 0.5})
    async with started(worker) as task:
        await until(lambda: source.committed.get(TP0) == 3)
    assert await task == 0
    (dead,) = sink.dead_letters
    assert dead.record.offset == 1
    assert dead.reason == "invalid_json"


async def test_unpublishable_result_becomes_an_error_result_and_commits() -> None:
    # A result whose details JSON cannot hold fails in the sink; its offset must still
    # complete (as an error result), or the partition's commits would stop there for good.
    worker, source, sink = build([raw(0), raw(1, "opaque"), raw(2)])
    with structlog.testing.capture_logs() as logs:
        async with started(worker) as task:
            await until(lambda: source.committed.get(TP0) == 3)
    assert await task == 0
    by_event = {r.event_id: r for r in sink.results}
    assert by_event["e1"].status == "error"
    assert by_event["e1"].error == "internal error: PydanticSerializationError"
    assert by_event["e0"].status == by_event["e2"].status == "ok"
    # Counted once, as published: e1's unpublishable "passed" result is not counted beside
    # its error result, so the outcome counters add up to the results on the topic.
    assert outcomes(worker) == {"passed": 2.0, "failed": 0.0, "labelled": 0.0, "error": 1.0}
    assert [e["error_type"] for e in logs if e["event"] == "evaluation_crashed"] == [
        "PydanticSerializationError"]


def test_results_are_eval_results() -> None:
    assert EvalResult.model_fields["result_id"].is_required()


async def test_content_is_logged_only_when_asked() -> None:
    worker, _, sink = build([raw(5, "boom")], logging={"log_content": True})
    with structlog.testing.capture_logs() as logs:
        async with started(worker):
            await until(lambda: len(sink.results) == 1)
    (failed,) = [entry for entry in logs if entry["event"] == "evaluator_failed"]
    assert failed["output"] == "boom"


async def test_messages_without_work_behind_a_slow_evaluation_take_no_memory_each() -> None:
    # One evaluation runs for seconds (a slow judge) while intake goes on with messages no
    # route takes. Each used to stay tracked, one offset entry apiece, until the slow one
    # finished: with a judge stuck up to its deadline, memory grew with traffic.
    n = 3000
    records = [raw(0, "sleep:2", app="a")] + [raw(i, app="b") for i in range(1, n + 1)]
    worker, source, sink = build(records, routes=[{
        "name": "main", "match": {"app": ["a"]},
        "evaluators": [{"evaluator": "unit_scripted"}]}])
    async with started(worker):
        await until(lambda: metric(worker, "evalstream_events_skipped_total",
                                   reason="no_route") == n)
        assert worker.in_flight == 1
        part = worker.tracker._parts[TP0]
        assert (len(part.order), len(part.remaining)) == (1, 1)  # was n + 1 each
        assert source.committed.get(TP0, 0) == 0  # offset 0 still holds the commits
        await until(lambda: source.committed.get(TP0) == n + 1)
    assert [r.event_id for r in sink.results] == ["e0"]


def _varied(i: int) -> RawRecord:
    """Message ``i``: unique ids, app, session and attribute values; a content-made skip
    reason, an unknown label or a malformed message now and then."""
    kind = i % 7
    if kind == 6:
        return RawRecord("traces", 0, i, b"{oops" if i % 2 else b"[]")
    output = ("ok", "fail", f"skip:reason_{i}", "bill me", f"surprise {i}", "ok")[kind]
    return raw(i, output, app=f"app-{i}", session_id=f"s-{i}",
               attributes={"user": f"u-{i}", f"k{i % 97}": f"v-{i}"})


def _series(worker: Worker) -> int:
    return sum(len(family.samples) for family in worker.metrics.registry.collect())


async def test_nothing_grows_with_varied_traffic_or_rebalances() -> None:
    # What a soak would show, in miniature: after a first round has produced every kind of
    # outcome, a second round of new ids, apps, attribute values, skip reasons and labels
    # (and a revoke/assign cycle) adds no series and leaves no per-message state behind.
    worker, source, _ = build(
        [_varied(i) for i in range(400)],
        routes=[{"name": "main", "evaluators": [{"evaluator": "unit_scripted"},
                                                {"evaluator": "unit_labels"}]}],
        drift={"enabled": True, "tick_s": 0.02, "windows_s": [60], "bucket_s": 10,
               "watch_labels": {"unit_labels": "other"}},
        worker={"commit_interval_s": 0.02})
    monitor = worker.observers[-1]

    def sizes() -> tuple[int, ...]:
        engine = monitor.engine  # type: ignore[attr-defined]
        return (_series(worker), len(worker.message_path._tasks), worker.tracker.pending(),
                len(worker.tracker._parts[TP0].remaining), len(engine._keys),
                len(worker.pipeline._skip_counters))

    async with started(worker):
        await until(lambda: source.committed.get(TP0) == 400)
        await until(lambda: metric(worker, "evalstream_pass_rate_samples", route="main",
                                   evaluator="unit_scripted", window="1m") > 0)
        await asyncio.sleep(0.1)  # a few more monitor ticks and lag refreshes
        first = sizes()
        await source.revoke([TP0])
        await worker.on_assigned([TP0])
        for i in range(400, 1600):
            source.add(_varied(i))
        await until(lambda: source.committed.get(TP0) == 1600)
        await asyncio.sleep(0.1)
        assert sizes() == first
    assert first[1:4] == (0, 0, 0)
    assert first[5] == 33  # 32 distinct content-made reasons + "other" (then no more)
    assert metric(worker, "evalstream_labels_total", route="main", evaluator="unit_labels",
                  label="other") > 0


async def test_intake_keeps_polling_while_it_waits_for_a_slot_mid_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # One slot, one batch of three: offset 1 waits for the slot while offset 0 runs 0.6 s.
    # A slot can be held for hours (evaluations waiting at a spend cap with
    # on_spend_cap: wait), and aiokafka leaves the group when not polled for
    # max_poll_interval_ms: the wait must keep polling. Was one 0.6 s gap without a poll.
    monkeypatch.setattr(message_path_module, "_SLOT_POLL_S", 0.05)
    records = [raw(0, "sleep:0.6"), raw(1), raw(2)]
    worker, source, sink = build(records, worker={"max_in_flight": 1,
                                                  "commit_interval_s": 0.02})
    loop = asyncio.get_running_loop()
    polls: list[float] = []
    poll = source.poll

    async def counted(timeout_s: float, max_records: int) -> Any:
        polls.append(loop.time())
        return await poll(timeout_s, max_records)

    monkeypatch.setattr(source, "poll", counted)
    async with started(worker):
        await until(lambda: worker.in_flight == 1 and worker.tracker.pending() == 2)
        began = loop.time()
        await until(lambda: source.committed.get(TP0) == 3)
        ended = loop.time()
    during = [t for t in polls if began <= t <= ended]
    gaps = [b - a for a, b in zip([began, *during], [*during, ended], strict=True)]
    assert max(gaps) < 0.3, gaps
    assert [r.event_id for r in sink.results] == ["e0", "e1", "e2"]


class CappedJudge(NullJudge):
    """Waits at a spend cap that never frees (on_spend_cap: wait): every request waits."""

    def __init__(self) -> None:
        clock = FakeClock(0.0)
        window = SpendWindow(3600, clock=clock)
        window.add(10.0)
        self.cap = SpendCap("capped", 1.0, window, lambda: None, wait=True)

    async def judge(self, request: JudgeRequest) -> Judgement:
        await self.cap.wait_for_room()
        raise AssertionError("the window never frees")

    def stop_waiting(self, scopes: Collection[Hashable] | None = None) -> None:
        self.cap.waits.stop(scopes)


def judged_worker(judge: Judge, records: list[RawRecord]
                  ) -> tuple[Worker, MemorySource, MemorySink]:
    """A worker asking ``judge`` (as "builtin") about ``records``, 4 in flight, a 30 s drain."""
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(worker={"shutdown_timeout_s": 30, "commit_interval_s": 0.02,
                                     "max_in_flight": 4}),
                    registry=CollectorRegistry(), judges={"builtin": judge}, source=source,
                    sink=sink)
    return worker, source, sink


def capped_worker(records: list[RawRecord]) -> tuple[Worker, MemorySource, MemorySink,
                                                     CappedJudge]:
    judge = CappedJudge()
    return (*judged_worker(judge, records), judge)


async def test_a_stop_cancels_evaluations_waiting_at_a_spend_cap() -> None:
    # Not drained for shutdown_timeout_s (30 s): they wait for budget, not for work.
    worker, source, sink, judge = capped_worker([raw(0), raw(1, "ask_judge"), raw(2)])
    loop = asyncio.get_running_loop()
    async with started(worker) as task:
        await until(lambda: judge.cap.waiting == 1 and len(sink.results) == 2)
        began = loop.time()
    assert loop.time() - began < 5
    assert task.result() == 0
    assert source.committed[TP0] == 1  # offset 1 is redelivered, not an error result
    assert sorted(r.event_id for r in sink.results) == ["e0", "e2"]


async def test_a_revoke_cancels_only_its_partitions_waits_at_a_spend_cap() -> None:
    records = [raw(0, "ask_judge", partition=0), raw(1, partition=0),
               raw(0, "ask_judge", partition=1), raw(1, partition=1)]
    worker, source, sink, judge = capped_worker(records)
    loop = asyncio.get_running_loop()
    async with started(worker):
        await until(lambda: judge.cap.waiting == 2 and len(sink.results) == 2)
        began = loop.time()
        await source.revoke([TP0])
        # Not the 15 s (session timeout / 2) a revoke waits for in-flight work.
        assert loop.time() - began < 5
        assert judge.cap.waiting == 1  # partition 1's evaluation still waits
        assert source.committed.get(TP0, 0) == 0  # offset 0 is redelivered to the next owner
        assert not worker.tracker.is_assigned(TP0)
    assert source.committed.get(TP1, 0) == 0
    assert {r.status for r in sink.results} == {"ok"}


class LateCappedJudge(CappedJudge):
    """Reaches its spend cap only once a revoke has stopped the waits (``stop_waiting``)."""

    def __init__(self) -> None:
        super().__init__()
        self.revoked = asyncio.Event()
        self.asked = 0

    async def judge(self, request: JudgeRequest) -> Judgement:
        self.asked += 1
        await self.revoked.wait()
        return await super().judge(request)

    def stop_waiting(self, scopes: Collection[Hashable] | None = None) -> None:
        super().stop_waiting(scopes)
        self.revoked.set()


async def test_a_revoked_partitions_evaluation_reaching_a_spend_cap_later_does_not_wait(
) -> None:
    # It reaches the cap after the revoke cancelled the waits: it waited out the window (an
    # hour), holding its slot for work redelivered to the partition's next owner, and the
    # revoke waited its deadline (15 s) for it.
    judge = LateCappedJudge()
    worker, source, sink = judged_worker(judge, [raw(0, "ask_judge"), raw(1)])
    loop = asyncio.get_running_loop()
    async with started(worker):
        await until(lambda: judge.asked == 1 and len(sink.results) == 1)
        began = loop.time()
        await source.revoke([TP0])
        assert loop.time() - began < 5
        await until(lambda: worker.in_flight == 0)
        assert judge.cap.waiting == 0
        assert source.committed.get(TP0, 0) == 0  # offset 0 is redelivered to the next owner
    assert [r.event_id for r in sink.results] == ["e1"]


async def test_a_revoke_cancels_a_closed_sessions_wait_at_a_spend_cap() -> None:
    # A closed session window's evaluation waiting at the cap is cancelled by the revoke of
    # its partition like any other (it had no wait scope: the revoke waited its deadline
    # for it, and then it held its slot, and evaluated a stale session, for hours).
    judge = CappedJudge()
    source, sink = MemorySource([raw(0, "ask_judge", session_id="s"), raw(1, "ask_judge",
                                                                          session_id="s")]), \
        MemorySink()
    worker = Worker(settings(
        sampling={"key": "session_id"},
        routes=[{"name": "main", "session": {"gap_s": 0.05},
                 "evaluators": [{"evaluator": "unit_scripted"}]}],
        worker={"shutdown_timeout_s": 30, "commit_interval_s": 0.02, "max_in_flight": 4}),
        registry=CollectorRegistry(), judges={"builtin": judge}, source=source, sink=sink)
    loop = asyncio.get_running_loop()
    async with started(worker):
        await until(lambda: judge.cap.waiting == 1)
        began = loop.time()
        await source.revoke([TP0])
        # Not the 15 s (session timeout / 2) a revoke waits for in-flight work.
        assert loop.time() - began < 5
        await until(lambda: judge.cap.waiting == 0 and worker.in_flight == 0)
        assert source.committed.get(TP0, 0) == 0  # redelivered to the next owner
    assert sink.results == []


async def test_a_revoke_cancels_an_evaluation_waiting_at_a_judges_rate_limit() -> None:
    # An OpenAI judge (a local server on a real socket) sends one request per 20 s: of two
    # evaluations of partition 0, one is sent, the other waits at the token bucket up to
    # its 20 s deadline, which the revoke waited for (up to 15 s) before this.
    async with llm_server() as server:
        judge = OpenAIJudge("builtin", OpenAIJudgeConfig(
            base_url=server.url, model="judge-model", requests_per_s=0.05, timeout_s=2.0,
            deadline_s=20.0, cache_size=0), Metrics())
        worker, source, sink = judged_worker(judge, [raw(0, "ask_judge"), raw(1, "ask_judge")])
        loop = asyncio.get_running_loop()
        try:
            async with started(worker):
                await until(lambda: len(sink.results) == 1 and worker.in_flight == 1)
                began = loop.time()
                await source.revoke([TP0])
                assert loop.time() - began < 5
                await until(lambda: worker.in_flight == 0)
                # At most the evaluation answered is committed; the one waiting is not.
                assert source.committed.get(TP0, 0) <= 1
        finally:
            await judge.aclose()
    assert len(server.posts) == 1
    assert len(sink.results) == 1


async def test_a_revoke_cancels_evaluations_waiting_for_a_judges_connection_slot() -> None:
    # An OpenAI judge (a local server on a real socket) with one connection slot and
    # answers that take 2 s: of three evaluations of partition 0, one is sent, the other
    # two queue for the slot. The revoke waited for all three (6 s) before this: now it
    # waits only for the one on the wire.
    async with llm_server(delay_s=2.0) as server:
        judge = OpenAIJudge("builtin", OpenAIJudgeConfig(
            base_url=server.url, model="judge-model", max_concurrency=1, timeout_s=5.0,
            deadline_s=20.0, cache_size=0), Metrics())
        worker, source, sink = judged_worker(judge, [raw(n, "ask_judge") for n in range(3)])
        loop = asyncio.get_running_loop()
        try:
            async with started(worker):
                await until(lambda: server.concurrent == 1 and worker.in_flight == 3)
                began = loop.time()
                await source.revoke([TP0])
                assert loop.time() - began < 3.5  # the 2 s answer, not three of them
                await until(lambda: worker.in_flight == 0)
                # At most the evaluation answered is committed; those waiting are not.
                assert source.committed.get(TP0, 0) <= 1
        finally:
            await judge.aclose()
    assert len(server.posts) == 1
    assert len(sink.results) == 1
