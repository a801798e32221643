"""``evalstream_consumer_lag_messages`` counts every message not yet done.

Under backpressure the consumer's position is past everything fetched: the messages waiting
for an evaluation slot, those being evaluated and those held in a session window. Counted
from the position, the gauge read 0 while they waited (the committed-offset lag KEDA reads
saw them). It counts from the lowest offset whose work is not complete instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app import worker as worker_module
from evalstream.app.worker import Worker
from evalstream.config import load_settings
from evalstream.events import RawRecord, dump_json
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES, raw, settings

PER_PARTITION = 20
#: Fewer slots than messages: the rest wait, fetched, for one to free up.
SLOTS = 4
#: Messages at the head of partition 0 that finish at once (done, so not counted).
QUICK = 3


@pytest.fixture(autouse=True)
def _fast_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "_LAG_INTERVAL_S", 0.01)


@asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[None]:
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    try:
        yield
    finally:
        worker.request_stop()
        assert await asyncio.wait_for(asyncio.shield(task), 15) == 0


def gauge(worker: Worker, partition: int) -> float | None:
    return worker.metrics.registry.get_sample_value(
        "evalstream_consumer_lag_messages", {"topic": "traces", "partition": str(partition)})


async def until(predicate: Any, what: str, timeout: float = 5.0) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_messages_waiting_for_a_slot_or_in_flight_count_as_lag() -> None:
    # Partition 0: QUICK messages that finish at once, then slow ones; partition 1: slow
    # only, fetched in the same poll but never reached (intake is stuck on partition 0,
    # waiting for a slot), so nothing of it is tracked yet.
    records = [raw(i, "ok" if i < QUICK else "sleep:30") for i in range(PER_PARTITION)]
    records += [raw(i, "sleep:30", partition=1) for i in range(PER_PARTITION)]
    source = MemorySource(records)
    worker = Worker(settings(worker={"max_in_flight": SLOTS, "commit_interval_s": 0.02,
                                     "shutdown_timeout_s": 0.1}),
                    registry=CollectorRegistry(), judges=JUDGES, source=source,
                    sink=MemorySink())
    async with started(worker):
        await until(lambda: worker.in_flight == SLOTS and worker.slots.paused,
                    "every slot taken and intake paused")
        assert await source.positions(sorted(source.assignment())) == {
            ("traces", 0): PER_PARTITION, ("traces", 1): PER_PARTITION}  # all fetched
        await until(lambda: gauge(worker, 0) == PER_PARTITION - QUICK
                    and gauge(worker, 1) == PER_PARTITION, "the gauges to count the waiting")
        await asyncio.sleep(0.05)  # several refreshes: the count holds
        assert (gauge(worker, 0), gauge(worker, 1)) == (PER_PARTITION - QUICK, PER_PARTITION)
        # What KEDA reads (the committed offsets) agrees.
        await until(lambda: source.committed.get(("traces", 0)) == QUICK, "the commit")
        assert source.committed.get(("traces", 1), 0) == 0


async def test_events_held_in_a_session_window_count_as_lag() -> None:
    def held(offset: int) -> RawRecord:
        body = {"event_id": f"a-{offset}", "session_id": "a", "input": "q", "output": "ok"}
        return RawRecord("traces", 0, offset, dump_json(body))

    source = MemorySource([held(i) for i in range(5)])
    worker = Worker(load_settings(
        None, inputs=[{"topic": "traces"}], sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": 60},
                 "evaluators": [{"evaluator": "unit_scripted"}]}],
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.02, "shutdown_timeout_s": 0.1}),
        registry=CollectorRegistry(), judges=JUDGES, source=source, sink=MemorySink())
    sessions = worker.sessions
    assert sessions is not None
    async with started(worker):
        await until(lambda: sessions.store.open_count() == 1, "the session held")
        assert await source.positions([("traces", 0)]) == {("traces", 0): 5}  # all fetched
        await asyncio.sleep(0.05)  # several refreshes since
        assert gauge(worker, 0) == 5
        assert source.committed.get(("traces", 0), 0) == 0
