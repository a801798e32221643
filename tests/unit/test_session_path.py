"""Session windows through the worker on in-memory doubles: a revoke abandons the open
windows of its partitions at once (not after its drain deadline), uncommitted, and the
redelivered events are windowed again and evaluated once, whole."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import structlog.testing
from prometheus_client import CollectorRegistry

from evalstream.app import sessions as sessions_module
from evalstream.app.worker import Worker
from evalstream.config import load_settings
from evalstream.errors import OutputRejectedError, SinkError
from evalstream.events import EvalResult, JudgeInfo, RawRecord, TraceEvent, dump_json
from evalstream.judges.base import Judgement, JudgeRequest
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.integration.workerkit import wait_for
from tests.unit import pipeline_doubles  # noqa: F401  (registers unit_scripted)
from tests.unit.test_worker_memory import CappedJudge

TP0 = ("traces", 0)
TP1 = ("traces", 1)


def record(partition: int, offset: int, session: str | None) -> RawRecord:
    body = {"event_id": f"{session}-{offset}", "input": f"question {offset}",
            "output": f"answer {offset}"}
    if session is not None:
        body["session_id"] = session
    return RawRecord("traces", partition, offset, dump_json(body))


def worker(source: MemorySource, sink: MemorySink, gap_s: float,
           session: dict[str, Any] | None = None, plain_route: bool = False,
           evaluator: dict[str, Any] | None = None, **worker_settings: Any) -> Worker:
    routes: list[dict[str, Any]] = [{"name": "chat",
                                     "session": {"gap_s": gap_s, **(session or {})},
                                     "evaluators": [evaluator or {"evaluator": "refusal"}]}]
    if plain_route:  # every event also matches a route without sessions
        routes.append({"name": "plain", "evaluators": [{"evaluator": "refusal"}]})
        worker_settings["routing"] = "all"
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"}, routes=routes,
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05, "shutdown_timeout_s": 20, **worker_settings},
        kafka={"session_timeout_ms": 45_000})
    return Worker(settings, registry=CollectorRegistry(), source=source, sink=sink)


@contextlib.asynccontextmanager
async def serving(w: Worker) -> AsyncIterator[None]:
    """Run ``w`` for the block (ready first), then stop it; it must exit cleanly."""
    ready = asyncio.Event()
    run = asyncio.create_task(w.run(ready))
    try:
        await asyncio.wait_for(ready.wait(), 5)
        yield
    finally:
        w.request_stop()
        assert await asyncio.wait_for(run, 10) == 0


async def run_until(w: Worker, done: Callable[[], bool], what: str) -> None:
    """Run ``w`` until ``done()``, then stop it; it must exit cleanly."""
    async with serving(w):
        await wait_for(done, timeout=10, what=what)


async def test_a_revoke_abandons_open_sessions_at_once_and_they_are_redone_whole() -> None:
    source = MemorySource([record(0, 0, "a"), record(0, 1, "a"), record(0, 2, None),
                           record(1, 0, "b")])
    sink = MemorySink()
    w = worker(source, sink, gap_s=3)
    sessions = w.sessions
    assert sessions is not None
    async with serving(w):
        await wait_for(lambda: sessions.store.open_count() == 2 and len(sink.results) == 1,
                       timeout=5, what="both sessions held, the plain event evaluated")
        started = time.monotonic()
        await source.revoke([TP0])
        # Neither the drain deadline (20 s) nor the gap (3 s): abandoned, not waited for.
        assert time.monotonic() - started < 1
        assert sessions.store.open_count() == 1  # b, on the partition kept
        assert w.metrics.registry.get_sample_value(
            "evalstream_sessions_closed_total", {"route": "chat", "reason": "abandoned"}) == 1
        assert source.committed.get(TP0, 0) == 0  # held behind session a: nothing committed
        assert [r.event_id for r in sink.results] == ["None-2"]

        # The partition comes back: its records are redelivered and windowed again.
        await w.on_assigned([TP0])
        await wait_for(lambda: source.committed.get(TP0) == 3 and source.committed.get(TP1) == 1,
                       timeout=10, what="both partitions committed to the end")
    by_session = {r.session_id: r for r in sink.results if r.session_id is not None}
    assert sorted(by_session) == ["a", "b"]
    assert len([r for r in sink.results if r.session_id == "a"]) == 1
    assert by_session["a"].details["session"]["event_ids"] == ["a-0", "a-1"]
    # The plain event was redone too: it sat behind the open session, uncommitted.
    assert [r.event_id for r in sink.results].count("None-2") == 2


async def test_a_canary_on_a_session_route_is_evaluated_on_its_own() -> None:
    """Held in its session's window, a canary would be judged as part of the conversation
    and its gold answer compared with that; the window's traffic would count as canary."""
    canary = {"event_id": "c-1", "session_id": "a", "input": "question 1",
              "output": "I'm sorry, but I can't help with that.",
              "attributes": {"evalstream.canary": "true", "evalstream.gold.refusal": "false"}}
    source = MemorySource([record(0, 0, "a"), RawRecord("traces", 0, 1, dump_json(canary))])
    sink = MemorySink()
    await run_until(worker(source, sink, gap_s=0.2), lambda: source.committed.get(TP0) == 2,
                    "both records committed")
    by_id = {r.event_id: r for r in sink.results}
    assert by_id["c-1"].canary
    assert by_id["c-1"].gold == "false"
    assert "session" not in by_id["c-1"].details
    (session,) = [r for r in sink.results if r.event_id != "c-1"]
    assert not session.canary
    assert session.details["session"]["event_ids"] == ["a-0"]



async def test_a_session_result_the_broker_refuses_becomes_an_error_result() -> None:
    """Its error result stands in for it (without the members' ids, which may be what made
    it too large), is counted once as an error, and the members' offsets complete."""
    source = MemorySource([record(0, 0, "a"), record(0, 1, "a")])
    sink = MemorySink()
    publish = sink.publish_result

    async def refuse_ok_results(result: EvalResult) -> None:  # e.g. over the size limit
        if result.status == "ok":
            raise OutputRejectedError("results refused a record of 2000000 bytes")
        await publish(result)

    sink.publish_result = refuse_ok_results  # type: ignore[method-assign]
    w = worker(source, sink, gap_s=0.2)
    with structlog.testing.capture_logs() as logs:
        await run_until(w, lambda: source.committed.get(TP0) == 2, "both members committed")
    # Under the message path's event name, so one log query finds refusals on both paths.
    assert [e["error"] for e in logs if e["event"] == "result_rejected"] == [
        "results refused a record of 2000000 bytes"]
    (failed,) = sink.results
    assert failed.status == "error"
    assert failed.error == "result rejected: results refused a record of 2000000 bytes"
    assert failed.details["session"]["closed"] == "gap"
    assert "event_ids" not in failed.details["session"]
    assert w.metrics.registry.get_sample_value(
        "evalstream_evaluations_total", {"route": "chat", "evaluator": "refusal",
                                         "outcome": "error"}) == 1


async def test_a_refused_session_result_s_stand_in_carries_its_judge_spend() -> None:
    """As on the message path: the judge was paid for the refused result, so its stand-in
    names the judge with that spend, counted by the cost metric (checked: fails without
    the fix, where the stand-in had judge: null)."""
    body = {"event_id": "a-0", "session_id": "a", "input": "q", "output": "costly"}
    source = MemorySource([RawRecord("traces", 0, 0, dump_json(body))])
    sink = MemorySink()
    publish = sink.publish_result

    async def refuse_ok_results(result: EvalResult) -> None:  # e.g. over the size limit
        if result.status == "ok":
            raise OutputRejectedError("results refused a record of 2000000 bytes")
        await publish(result)

    sink.publish_result = refuse_ok_results  # type: ignore[method-assign]
    w = worker(source, sink, gap_s=0.1, evaluator={"evaluator": "unit_scripted"})
    await run_until(w, lambda: source.committed.get(TP0) == 1, "the member committed")
    (failed,) = sink.results
    assert failed.status == "error"
    assert failed.judge == JudgeInfo(backend="openai", model="m", cost_usd=0.002)
    assert w.metrics.registry.get_sample_value(
        "evalstream_evaluation_cost_usd_total",
        {"route": "chat", "evaluator": "unit_scripted"}) == pytest.approx(0.002)


async def test_until_caught_up_waits_for_open_sessions_and_evaluates_them() -> None:
    """``run --until-caught-up`` ends once every partition is committed to its end, which
    open windows hold back: it neither stops before they close (abandoning them, exit 0
    with work undone) nor hangs, since the timer closes them after their gap."""
    source = MemorySource([record(0, 0, "a"), record(0, 1, "a"), record(0, 2, None),
                           record(1, 0, "b")])
    sink = MemorySink()
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": 0.3},
                 "evaluators": [{"evaluator": "refusal"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05})
    w = Worker(settings, registry=CollectorRegistry(), source=source, sink=sink,
               until_caught_up=True)
    assert await asyncio.wait_for(w.run(), 10) == 0
    assert source.committed == {TP0: 3, TP1: 1}
    assert sorted(r.session_id or "-" for r in sink.results) == ["-", "a", "b"]


async def test_a_window_that_cannot_be_merged_is_still_evaluated_and_committed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in merging must not hold the members' offsets forever: the window is
    evaluated on its latest member instead, marked ``merge_failed``, and committed."""
    def broken(session_id: str, events: object) -> TraceEvent:
        raise RuntimeError("merge bug")

    monkeypatch.setattr(sessions_module, "merge_events", broken)
    # 40 sessions of two: the merge fails on every one, logged as a burst, not 40 lines.
    records = [record(0, i, f"s{i // 2}") for i in range(80)]
    source = MemorySource(records)
    sink = MemorySink()
    with structlog.testing.capture_logs() as logs:
        await run_until(worker(source, sink, gap_s=0.2),
                        lambda: source.committed.get(TP0) == 80, "every member committed")
    assert len(sink.results) == 40
    result = next(r for r in sink.results if r.session_id == "s0")
    assert result.event_id == "s0-1"
    assert result.details["session"] == {"closed": "gap", "merge_failed": True}
    failed = [e for e in logs if e["event"] == "session_merge_failed"]
    assert 1 <= len(failed) <= 10


def test_without_session_routes_there_is_no_session_path() -> None:
    settings = load_settings(None, inputs=[{"topic": "traces"}],
                             routes=[{"name": "chat", "evaluators": [{"evaluator": "refusal"}]}],
                             server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False})
    w = Worker(settings, registry=CollectorRegistry(), source=MemorySource([]),
               sink=MemorySink())
    assert w.sessions is None


async def test_other_routes_evaluate_at_once_beside_an_open_session() -> None:
    source = MemorySource([record(0, 0, "a")])
    sink = MemorySink()
    w = worker(source, sink, gap_s=30, plain_route=True)
    registry = w.metrics.registry

    def plain_done_and_session_open() -> bool:
        return [r.route for r in sink.results] == ["plain"] and registry.get_sample_value(
            "evalstream_sessions_open", {"route": "chat"}) == 1

    await run_until(w, plain_done_and_session_open, "the plain route's result, chat held")


async def test_a_route_past_max_bytes_evaluates_its_sessions_at_once() -> None:
    source = MemorySource([record(0, 0, "a"), record(0, 1, "b")])
    sink = MemorySink()
    w = worker(source, sink, gap_s=30, session={"max_bytes": 1})
    await run_until(w, lambda: len(sink.results) == 2, "both sessions evaluated")
    assert [r.details["session"]["closed"] for r in sink.results] == ["capacity"] * 2
    assert w.metrics.registry.get_sample_value(
        "evalstream_sessions_closed_total", {"route": "chat", "reason": "capacity"}) == 2


async def test_sessions_share_the_in_flight_bound_and_release_it() -> None:
    """With one slot, sessions closing together are evaluated one after the other."""
    source = MemorySource([record(0, 0, "a"), record(0, 1, "b"), record(0, 2, "c")])
    sink = MemorySink()
    w = worker(source, sink, gap_s=0.2, max_in_flight=1)
    sessions = w.sessions
    assert sessions is not None
    await run_until(w, lambda: source.committed.get(TP0) == 3, "all three committed")
    assert sorted(r.session_id or "" for r in sink.results) == ["a", "b", "c"]
    assert not sessions.tasks  # finished evaluations are not kept


async def test_a_session_result_the_sink_cannot_take_stops_the_worker_uncommitted() -> None:
    """Output that cannot be made durable (SinkError) stops the worker, and the session's
    members are not committed: they are redelivered, never lost."""
    source = MemorySource([record(0, 0, "a"), record(0, 1, "a")])
    sink = MemorySink()

    async def broker_down(result: EvalResult) -> None:
        raise SinkError("results: broker down")

    sink.publish_result = broker_down  # type: ignore[method-assign]
    w = worker(source, sink, gap_s=0.2)
    assert await asyncio.wait_for(w.run(), 10) == 1
    assert source.committed.get(TP0, 0) == 0


async def test_a_session_evaluation_a_bug_ends_stops_the_worker_uncommitted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug past the evaluation's own guards would leave the members incomplete, holding
    the partition's commits for good while the worker looked healthy: it stops instead,
    with the error type logged, and the members are redelivered."""
    from evalstream.app.session_path import SessionPath

    async def bug(*_: object) -> bool:
        raise RuntimeError("a bug")

    monkeypatch.setattr(SessionPath, "_one", bug)
    source = MemorySource([record(0, 0, "a"), record(0, 1, "a")])
    w = worker(source, MemorySink(), gap_s=0.2)
    with structlog.testing.capture_logs() as logs:
        assert await asyncio.wait_for(w.run(), 10) == 1
    assert source.committed.get(TP0, 0) == 0
    assert [e["error_type"] for e in logs if e["event"] == "session_evaluation_failed"] == [
        "RuntimeError"]


async def test_a_session_its_evaluator_skips_publishes_nothing_and_is_committed() -> None:
    # role_adherence needs a role: without a system prompt or chatbot_role it skips.
    source = MemorySource([record(0, 0, "a")])
    sink = MemorySink()
    w = worker(source, sink, gap_s=0.2, evaluator={
        "evaluator": "role_adherence", "params": {"role_from_system_prompt": True}})
    await run_until(w, lambda: source.committed.get(TP0) == 1, "the member committed")
    assert sink.results == []
    assert w.metrics.registry.get_sample_value(
        "evalstream_events_skipped_total", {"reason": "no_role"}) == 1


async def test_a_route_with_a_short_gap_closes_on_time_beside_one_with_a_long_gap() -> None:
    """The timer wakes for the shortest gap of all routes, so a window opened while it
    sleeps is not left waiting for a longer route's gap."""
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "slow", "match": {"app": ["never"]}, "session": {"gap_s": 60},
                 "evaluators": [{"evaluator": "refusal"}]},
                {"name": "chat", "session": {"gap_s": 0.2},
                 "evaluators": [{"evaluator": "refusal"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05})
    source, sink = MemorySource([record(0, 0, None)]), MemorySink()  # no session
    w = Worker(settings, registry=CollectorRegistry(), source=source, sink=sink)
    async with serving(w):
        await wait_for(lambda: len(sink.results) == 1, timeout=5, what="the plain event")
        await asyncio.sleep(0.1)  # the timer is asleep, with no window open
        source.add(record(0, 1, "a"))
        await wait_for(lambda: len(sink.results) == 2, timeout=5, what="chat's session closed")


def record_with_output(offset: int, output: str) -> RawRecord:
    """An event of session ``a`` whose output scripts ``unit_scripted`` (``sleep:<s>``,
    ``ask_judge``)."""
    body = {"event_id": f"a-{offset}", "session_id": "a", "input": "q", "output": output}
    return RawRecord("traces", 0, offset, dump_json(body))


def two_evaluations_of_one_session(judge: Any) -> tuple[Worker, MemorySource, MemorySink]:
    """A worker whose one session route runs two evaluators (``one``, ``two``) with
    ``judge`` on one message asking the judge, quiet after 50 ms."""
    source, sink = MemorySource([record_with_output(0, "ask_judge")]), MemorySink()
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": 0.05},
                 "evaluators": [{"evaluator": "unit_scripted", "name": "one"},
                                {"evaluator": "unit_scripted", "name": "two"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05, "shutdown_timeout_s": 5})
    w = Worker(settings, registry=CollectorRegistry(), judges={"builtin": judge},
               source=source, sink=sink)
    return w, source, sink


async def revoke_while_evaluating(seconds: float, cancel: bool) -> tuple[float, MemorySource,
                                                                          MemorySink]:
    """Revoke TP0 while its closed session is being evaluated (its evaluation first
    cancelled, as a revoke does to a wait at a judge's spend cap, when ``cancel``); returns
    how long the revoke took."""
    source, sink = MemorySource([record_with_output(0, f"sleep:{seconds}")]), MemorySink()
    w = worker(source, sink, gap_s=0.05, evaluator={"evaluator": "unit_scripted"},
               shutdown_timeout_s=3)
    sessions = w.sessions
    assert sessions is not None
    async with serving(w):
        await wait_for(lambda: bool(sessions.tasks) and w.slots.count == 1, timeout=5,
                       what="the session's evaluation running")
        if cancel:
            for task in sessions.tasks:
                task.cancel()
            await wait_for(lambda: not sessions.tasks, timeout=5, what="the task cancelled")
            assert w.tracker.pending([TP0]) == 0  # its member abandoned exactly once
        started = time.monotonic()
        await source.revoke([TP0])
        took = time.monotonic() - started
    return took, source, sink


async def test_a_revoke_waits_for_a_closed_session_only_until_it_is_done() -> None:
    took, source, sink = await revoke_while_evaluating(0.3, cancel=False)
    assert took < 2  # woken when the session completes, not at the 3 s deadline
    assert source.committed == {TP0: 1}
    assert len(sink.results) == 1


async def test_a_cancelled_session_evaluation_is_abandoned_not_waited_for() -> None:
    took, source, sink = await revoke_while_evaluating(30, cancel=True)
    assert took < 2  # its members abandoned: nothing left to wait for
    assert source.committed.get(TP0, 0) == 0  # and never committed: redelivered
    assert sink.results == []


async def test_a_revoke_cancels_a_session_waiting_at_a_judge_spend_cap() -> None:
    """A closed session's evaluation waiting at a spend cap (on_spend_cap: wait) is in its
    members' partition's scope: a revoke cancels it at once (the next owner redoes it)
    rather than waiting its deadline for budget that may take hours."""
    judge = CappedJudge()
    source, sink = MemorySource([record_with_output(0, "ask_judge")]), MemorySink()
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": 0.05},
                 "evaluators": [{"evaluator": "unit_scripted"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05, "shutdown_timeout_s": 3})
    w = Worker(settings, registry=CollectorRegistry(), judges={"builtin": judge},
               source=source, sink=sink)
    async with serving(w):
        await wait_for(lambda: judge.cap.waiting == 1, timeout=5, what="waiting at the cap")
        started = time.monotonic()
        await source.revoke([TP0])
        assert time.monotonic() - started < 2  # not the 3 s deadline
        assert judge.cap.waiting == 0
        assert source.committed.get(TP0, 0) == 0
    assert sink.results == []


async def test_a_session_evaluation_cancelled_before_it_ran_is_abandoned() -> None:
    """A task cancelled before its first step never runs its coroutine's body, so nothing
    in ``_evaluate`` can see the cancel: its members must still be abandoned (once), or a
    revoke waits its whole deadline for work that will never complete."""
    source, sink = MemorySource([record(0, 0, "a")]), MemorySink()
    w = worker(source, sink, gap_s=0.05, shutdown_timeout_s=3)
    sessions = w.sessions
    assert sessions is not None
    launch = sessions._launch

    def launch_then_cancel(closed: sessions_module.Closed) -> None:
        launch(closed)
        sessions.cancel()  # as a stop or revoke cancelling the tasks right after a close

    sessions._launch = launch_then_cancel  # type: ignore[method-assign]
    closed = w.metrics.registry.get_sample_value
    async with serving(w):
        await wait_for(lambda: closed("evalstream_sessions_closed_total",
                                      {"route": "chat", "reason": "gap"}) == 1
                       and not sessions.tasks, timeout=5, what="the session closed, cancelled")
        await asyncio.sleep(0.05)  # the commit interval: a commit must not pass it either
        assert w.tracker.pending([TP0]) == 0  # abandoned exactly once (not -1)
        started = time.monotonic()
        await source.revoke([TP0])
        assert time.monotonic() - started < 2  # not the 3 s deadline
        assert source.committed.get(TP0, 0) == 0  # redelivered, never committed past
    assert sink.results == []



class CappedThenWiredJudge(CappedJudge):
    """Its first request waits at the spend cap (a revoke cancels that wait); the others
    answer after ``seconds``, as a request on the wire does (no stop cancels that)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.asked = self.cancelled = 0

    async def judge(self, request: JudgeRequest) -> Judgement:
        self.asked += 1
        if self.asked == 1:
            return await super().judge(request)
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return Judgement({"yes": 1.0, "no": 0.0}, JudgeInfo(backend="builtin"))


async def test_a_session_whose_evaluation_a_revoke_cancels_leaves_none_of_its_own_running(
) -> None:
    """Two evaluations of one session: the revoke cancels the one waiting at a spend cap.
    That fails the session (its members are abandoned, redone by the next owner), and the
    other one, on the wire, must not outlive it: untracked, it held its in-flight slot, a
    drain did not wait for it, and its result went out (or into a closed sink) for members
    already given up."""
    judge = CappedThenWiredJudge(30.0)
    w, source, sink = two_evaluations_of_one_session(judge)
    sessions = w.sessions
    assert sessions is not None
    async with serving(w):
        await wait_for(lambda: judge.cap.waiting == 1 and judge.asked == 2, timeout=5,
                       what="one evaluation at the cap, the other on the wire")
        await source.revoke([TP0])
        await wait_for(lambda: not sessions.tasks, timeout=5, what="the session ended")
        assert w.slots.count == 0  # nothing of the session still running
        assert judge.cancelled == 1  # the one on the wire too: its members are given up
        assert w.tracker.pending([TP0]) == 0
        assert source.committed.get(TP0, 0) == 0
    assert sink.results == []


async def test_a_session_result_a_bug_keeps_from_publishing_logs_evaluation_crashed() -> None:
    """As on the message path: one log query finds the crashes of both paths, by type only
    (the message may quote the conversation)."""
    source, sink = MemorySource([record_with_output(0, "opaque")]), MemorySink()
    w = worker(source, sink, gap_s=0.05, evaluator={"evaluator": "unit_scripted"})
    with structlog.testing.capture_logs() as logs:
        await run_until(w, lambda: source.committed.get(TP0) == 1, "the member committed")
    assert [e["error_type"] for e in logs if e["event"] == "evaluation_crashed"] == [
        "PydanticSerializationError"]
    (failed,) = sink.results
    assert failed.error == "internal error: PydanticSerializationError"


class SlowToStopJudge(CappedThenWiredJudge):
    """As ``CappedThenWiredJudge``, but a request on the wire, cancelled, takes a moment to
    wind down (as closing a connection does) before it ends."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.stopped = 0

    async def judge(self, request: JudgeRequest) -> Judgement:
        if self.asked == 0:  # the first: waits at the cap
            return await super().judge(request)
        try:
            return await super().judge(request)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            self.stopped += 1
            raise


async def test_a_cancelled_session_ends_only_after_its_evaluations_wound_down() -> None:
    """The session's task must not end while one of its evaluations still runs (winding
    down after the cancel): a drain waits for the task only, so that evaluation would
    outlive it."""
    judge = SlowToStopJudge(30.0)
    w, source, sink = two_evaluations_of_one_session(judge)
    sessions = w.sessions
    assert sessions is not None
    stopped_when_the_session_ended: list[int] = []
    async with serving(w):
        await wait_for(lambda: judge.cap.waiting == 1 and judge.asked == 2, timeout=5,
                       what="one evaluation at the cap, the other on the wire")
        (task,) = sessions.tasks
        task.add_done_callback(lambda _: stopped_when_the_session_ended.append(judge.stopped))
        await source.revoke([TP0])
        await wait_for(lambda: not sessions.tasks, timeout=5, what="the session ended")
    assert stopped_when_the_session_ended == [1]
    assert sink.results == []


async def test_a_route_s_max_bytes_bounds_the_memory_its_open_sessions_hold() -> None:
    """``max_bytes`` is what bounds a session route's memory: counted as the messages' bytes,
    small events (a ~100-byte message decodes to ~2 KB of objects) held twenty times that."""
    limit = 1_000_000
    sink = MemorySink()
    w = worker(MemorySource([]), sink, gap_s=1000,
               session={"max_bytes": limit, "max_events": 10_000, "max_open": 1_000})
    sessions, tracker, intake = w.sessions, w.tracker, w.message_path.intake
    assert sessions is not None
    tracker.assign([TP0])
    records = [record(0, i, f"s{i % 1_000}") for i in range(4_000)]
    # Tracked before measuring: offsets are the tracker's memory, not the windows'.
    states = [tracker.track(TP0, r.offset, 1) for r in records]

    async def evaluated() -> None:
        # Windows closed at capacity are held no longer once evaluated (their results are
        # the sink's). Waited for, not gathered: a gather would keep every task.
        await wait_for(lambda: not sessions.tasks, timeout=30, what="closed ones evaluated")
        sink.results.clear()

    gc.collect()
    tracemalloc.start()
    try:
        for r, state in zip(records, states, strict=True):
            decoded = intake.decode(r)
            assert state is not None
            assert not isinstance(decoded, str)
            sessions.hold(r, state, [(e, "chat", ()) for e in decoded.events],
                          len(decoded.events))
            if r.offset % 500 == 499:  # a poll's worth, as intake takes them
                await evaluated()
        await evaluated()
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sessions.store.open_count() > 0
    assert held <= 1.5 * limit, held


async def test_a_session_does_not_go_quiet_while_intake_is_paused_for_backpressure() -> None:
    """Paused for want of a slot (a slow judge, a judge outage, a spend cap), intake reads
    no event: a conversation is not quiet then, only unread. Timed on the wall clock, every
    open session closed on the gap during a pause longer than ``gap_s`` and its next event,
    read after it, was judged apart as a late part."""
    plain = {"event_id": "x-1", "output": "sleep:1.0"}  # holds the only slot for 1 s
    source = MemorySource([record(0, 0, "a"), RawRecord("traces", 0, 1, dump_json(plain)),
                           record(0, 2, "a")])
    sink = MemorySink()
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "match": {"requires": ["session_id"]},
                 "session": {"gap_s": 0.3}, "evaluators": [{"evaluator": "unit_scripted"}]},
                {"name": "plain", "evaluators": [{"evaluator": "unit_scripted"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        kafka={"max_poll_records": 1},
        worker={"commit_interval_s": 0.05, "max_in_flight": 1})
    w = Worker(settings, registry=CollectorRegistry(), source=source, sink=sink)
    await run_until(w, lambda: source.committed.get(TP0) == 3, "every record committed")
    sessions = [r.details["session"] for r in sink.results if r.session_id == "a"]
    assert [s["event_ids"] for s in sessions] == [["a-0", "a-2"]]
    assert source.pause_count >= 1  # it was paused: the case under test



async def test_the_session_timer_waits_for_intake_to_resume_instead_of_spinning() -> None:
    """While intake is paused the reading clock stands still, so a window due in 1 ms
    stays due in 1 ms: the timer slept its 5 ms minimum over and over (about 200 wake-ups
    a second for as long as a spend cap or a judge outage held intake; checked: ~60 in
    this test). It waits for reading to resume instead."""
    source = MemorySource([])
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": 0.3},
                 "evaluators": [{"evaluator": "unit_scripted"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False})
    w = Worker(settings, registry=CollectorRegistry(), source=source, sink=MemorySink())
    sessions = w.sessions
    assert sessions is not None
    slots = sessions._slots

    class Store:
        """A window due 1 ms after the pause began, on the reading clock."""

        routes = sessions.routes
        checks = 0

        def soonest(self, route: str) -> float:
            return 0.3

        def due(self, now: float) -> list[Any]:
            Store.checks += 1
            return []

        def next_deadline(self) -> float:
            return paused_at + 0.001

    sessions.store = Store()  # type: ignore[assignment]
    slots.set_paused(True)
    paused_at = slots.reading_clock()
    timer = asyncio.create_task(sessions.run())
    await asyncio.sleep(0.3)
    assert Store.checks <= 1, Store.checks
    slots.set_paused(False)
    await asyncio.sleep(0.05)
    assert Store.checks > 1  # reading again: the timer runs on
    timer.cancel()
    await asyncio.gather(timer, return_exceptions=True)
