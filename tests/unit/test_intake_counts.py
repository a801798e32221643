"""Intake's counts (events decoded, skips) reach the metrics while a batch waits for
evaluation slots, and are not lost when a stop ends intake in the middle of a batch.

They are gathered per batch and added once it is handled. Under backpressure a batch can
wait for slots as long as a slow judge takes (minutes): messages_consumed already counted
it, events_decoded did not, and a stop then dropped the counts of what was handled, its
results published and its offsets committed."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import RawRecord
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES, raw, settings


def _decoded(worker: Worker) -> float:
    return worker.metrics.registry.get_sample_value(
        "evalstream_events_decoded_total", {"format": "flat_json"}) or 0.0


async def _until(predicate: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.01)


async def _started(records: list[RawRecord]) -> tuple[Worker, MemorySource, MemorySink,
                                                      asyncio.Task[int]]:
    """A worker with one evaluation slot on ``records``, running and ready."""
    source, sink = MemorySource(records), MemorySink()
    worker = Worker(settings(worker={"max_in_flight": 1, "shutdown_timeout_s": 0.2,
                                     "commit_interval_s": 0.05}),
                    registry=CollectorRegistry(), judges=JUDGES, source=source, sink=sink)
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    return worker, source, sink, task


async def test_decoded_events_are_counted_while_the_batch_waits_for_a_slot() -> None:
    worker, _, _, task = await _started([raw(0, "sleep:30"), raw(1), raw(2)])
    try:
        await _until(lambda: worker.in_flight == 1 and worker.slots.paused)
        # Intake waits in the middle of the batch with two events decoded: they count
        # within the second it polls the paused consumer (was 0 until the judge answered).
        await _until(lambda: _decoded(worker) >= 2, timeout=3.0)
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 15)


async def test_a_stop_mid_batch_keeps_the_counts_of_what_was_handled() -> None:
    # Partition 0 is handled (result published, committed); partition 1 waits for a slot
    # behind a slow evaluation when the stop comes.
    worker, source, sink, task = await _started(
        [raw(0, partition=0), raw(1, "sleep:30", partition=1), raw(2, partition=1)])
    await _until(lambda: len(sink.results) == 1 and worker.in_flight == 1)
    worker.request_stop()
    await asyncio.wait_for(task, 15)
    assert source.committed.get(("traces", 0)) == 1
    assert _decoded(worker) >= 2  # was 0: the batch's counts were dropped with it
