"""``run --until-caught-up``: the worker stops by itself, exit 0, once every partition is
committed up to the end it had when assigned; records written later do not keep it going."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from prometheus_client import CollectorRegistry

from evalstream.app.caught_up import CaughtUp
from evalstream.app.offsets import TP, OffsetTracker
from evalstream.app.worker import Worker
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES, raw, settings

TP0 = ("traces", 0)
TP1 = ("traces", 1)


def _worker(source: MemorySource, *, until_caught_up: bool) -> tuple[Worker, MemorySink]:
    sink = MemorySink()
    worker = Worker(settings(), registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=sink, until_caught_up=until_caught_up)
    return worker, sink


async def _trickle(source: MemorySource, first: int) -> None:
    """Live traffic: a record every few milliseconds, for ever."""
    i = first
    while True:
        await asyncio.sleep(0.005)
        source.add(raw(i, partition=0))
        i += 2


async def test_stops_once_committed_to_the_ends_it_had_at_assignment() -> None:
    source = MemorySource([raw(i, partition=i % 2) for i in range(10)])
    worker, sink = _worker(source, until_caught_up=True)
    ready = asyncio.Event()
    run = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    trickle = asyncio.create_task(_trickle(source, 10))
    try:
        code = await asyncio.wait_for(run, 10)
    finally:
        trickle.cancel()
    assert code == 0
    assert source.committed[TP0] >= 9  # offsets 0, 2 ... 8
    assert source.committed[TP1] == 10  # offsets 1, 3 ... 9
    assert {f"e{i}" for i in range(10)} <= {r.event_id for r in sink.results}


async def test_without_the_flag_the_worker_keeps_running() -> None:
    source = MemorySource([raw(i) for i in range(3)])
    worker, _ = _worker(source, until_caught_up=False)
    run = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(5):
            while source.committed.get(TP0) != 3:
                await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)  # two checks' worth (0.5 s apart) if it were on
        assert not run.done()
    finally:
        worker.request_stop()
    assert await asyncio.wait_for(run, 10) == 0


class _Broker(MemorySource):
    """Ends and positions as a broker gives them: fixed here, whatever was handed out."""

    def __init__(self, end: int, position: int) -> None:
        super().__init__([])
        self._end, self._position = end, position

    def assignment(self) -> set[TP]:
        return {TP0}

    async def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        return dict.fromkeys(tps, self._end)

    async def positions(self, tps: Sequence[TP]) -> dict[TP, int]:
        return dict.fromkeys(tps, self._position)


async def test_records_taken_before_the_start_is_read_are_waited_for() -> None:
    # The start is read after an await (the end offsets), while the message path polls:
    # records 0-9 can be handed out meanwhile, so the position reads 10, the end. Taken as
    # the start, that made the Job stop with the ten still being evaluated (exit 0, the
    # ones not yet started abandoned and uncommitted).
    tracker = OffsetTracker()
    tracker.assign([TP0])
    caught_up = CaughtUp(_Broker(end=10, position=10), tracker)
    states = [(tracker.track(TP0, offset, 1), offset) for offset in range(10)]
    await caught_up.assigned([TP0])
    assert not await caught_up.reached()
    for state, offset in states:
        assert state is not None
        tracker.done(state, offset)
    tracker.committed(tracker.committable())
    assert await caught_up.reached()


async def test_a_partition_with_nothing_to_do_is_done_at_once() -> None:
    tracker = OffsetTracker()
    tracker.assign([TP0])
    caught_up = CaughtUp(_Broker(end=7, position=7), tracker)
    await caught_up.assigned([TP0])
    assert await caught_up.reached()


class _SlowPositions(_Broker):
    """The first ``positions`` gets no answer in time (a slow broker at assignment)."""

    def __init__(self, end: int, position: int) -> None:
        super().__init__(end, position)
        self.asked = 0

    async def positions(self, tps: Sequence[TP]) -> dict[TP, int]:
        self.asked += 1
        return {} if self.asked == 1 else await super().positions(tps)


async def test_a_start_unknown_at_assignment_is_asked_for_again() -> None:
    # Nothing to do in the partition, so nothing is ever committed there: with its start
    # unknown, the Job used to wait for ever.
    tracker = OffsetTracker()
    tracker.assign([TP0])
    source = _SlowPositions(end=7, position=7)
    caught_up = CaughtUp(source, tracker)
    await caught_up.assigned([TP0])
    assert await caught_up.reached()


class _BrokenEnds(MemorySource):
    """No end offsets at assignment (no answer in time), then a bug on every later ask."""

    def __init__(self) -> None:
        super().__init__([raw(0)])
        self.asked = 0

    async def end_offsets(self, tps: Sequence[TP]) -> dict[TP, int]:
        self.asked += 1
        if self.asked == 1:
            return {}
        raise RuntimeError("source bug")


async def test_a_check_that_crashes_stops_the_job_instead_of_leaving_it_running() -> None:
    # The background tasks had no supervisor: this one ended with its exception unseen
    # (until the stop's gather discarded it), and the Job ran on for ever, saying nothing.
    source = _BrokenEnds()
    worker, _ = _worker(source, until_caught_up=True)
    with structlog.testing.capture_logs() as logs:
        run = asyncio.create_task(worker.run())
        try:
            code = await asyncio.wait_for(asyncio.shield(run), 5)
        finally:
            worker.request_stop()
            await asyncio.wait_for(run, 10)
    assert code == 1
    assert [e["error"] for e in logs if e["event"] == "worker_failed"] == ["source bug"]


async def test_a_job_stopped_before_it_caught_up_exits_1() -> None:
    # A Kubernetes Job counts exit 0 as done: a backfill stopped half-way (a node drain or
    # eviction sends SIGTERM) exited 0 like one that caught up, and the Job was marked
    # complete with the rest of the window never scored.
    worker, _ = _worker(_Broker(end=10, position=0), until_caught_up=True)
    with structlog.testing.capture_logs() as logs:
        run = asyncio.create_task(worker.run())
        await asyncio.sleep(1.2)  # two caught-up checks: not there
        assert not run.done()
        worker.request_stop()
        code = await asyncio.wait_for(run, 10)
    assert code == 1
    [stopped] = [e for e in logs if e["event"] == "stopped_before_caught_up"]
    assert stopped["ends"] == {"traces:0": 10}


async def test_a_job_stopped_while_starting_exits_1() -> None:
    worker, _ = _worker(MemorySource([raw(0)]), until_caught_up=True)
    worker.request_stop()
    assert await asyncio.wait_for(worker.run(), 10) == 1


async def test_a_worker_stopped_while_starting_still_exits_0() -> None:
    worker, _ = _worker(MemorySource([raw(0)]), until_caught_up=False)
    worker.request_stop()
    assert await asyncio.wait_for(worker.run(), 10) == 0
