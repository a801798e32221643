"""The worker's collector settings once it is built (``run_worker`` in ``app/worker.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc

from prometheus_client import CollectorRegistry

from evalstream.app.worker import run_worker
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES, raw, settings


async def test_young_collections_wait_for_10000_objects_once_the_worker_is_built() -> None:
    # The in-flight work's objects rise and fall by thousands: at the interpreter's 700 a
    # young collection ran every ~30 evaluations, finding next to nothing.
    before = gc.get_threshold()
    gc.set_threshold(700, before[1], before[2])
    ready = asyncio.Event()
    task = asyncio.create_task(run_worker(
        settings(), registry=CollectorRegistry(), ready_event=ready, handle_signals=False,
        judges=JUDGES, source=MemorySource([raw(0)]), sink=MemorySink()))
    try:
        await asyncio.wait_for(ready.wait(), 5)
        # The older generations keep theirs.
        assert gc.get_threshold() == (10_000, before[1], before[2])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # run_worker froze this test process's objects too.
        gc.unfreeze()
        gc.set_threshold(*before)
