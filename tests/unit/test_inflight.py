"""The in-flight bound (``InFlight``) and the shared close deadline (``SharedDeadline``)."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from evalstream.app.inflight import InFlight
from evalstream.app.waits import SharedDeadline
from evalstream.metrics import Metrics
from evalstream.sources.memory import MemorySource


def limiter(limit: int) -> tuple[InFlight, MemorySource, CollectorRegistry]:
    registry = CollectorRegistry()
    source = MemorySource()
    return InFlight(limit, source, Metrics(registry)), source, registry


async def test_a_full_limiter_pauses_the_source_and_waits_for_a_release() -> None:
    slots, source, registry = limiter(2)
    await slots.acquire()
    await slots.acquire()
    assert slots.full
    assert not source.paused

    third = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    # Waiting for a slot pauses intake instead of buffering what the source fetched.
    assert source.paused
    assert slots.paused
    assert not third.done()
    assert registry.get_sample_value("evalstream_consumer_paused") == 1
    assert registry.get_sample_value("evalstream_backpressure_pauses_total") == 1

    slots.release()
    await asyncio.wait_for(third, 1)
    assert slots.count == 2
    assert slots.peak == 2
    assert registry.get_sample_value("evalstream_in_flight_evaluations") == 2
    assert registry.get_sample_value("evalstream_in_flight_evaluations_peak") == 2

    slots.set_paused(False)
    assert not source.paused
    assert registry.get_sample_value("evalstream_consumer_paused") == 0
    slots.set_paused(False)  # already resumed: no second resume, no count
    assert registry.get_sample_value("evalstream_backpressure_pauses_total") == 1


async def test_peak_is_kept_after_the_count_falls() -> None:
    slots, _, registry = limiter(3)
    for _ in range(3):
        await slots.acquire()
    for _ in range(3):
        slots.release()
    assert slots.count == 0
    assert slots.peak == 3
    assert not slots.full
    assert registry.get_sample_value("evalstream_in_flight_evaluations") == 0


async def test_wait_freed_returns_on_a_release_not_at_the_timeout() -> None:
    slots, source, _ = limiter(1)
    await slots.acquire()
    asyncio.get_running_loop().call_later(0.05, slots.release)
    started = time.monotonic()
    await slots.wait_freed(5.0)
    assert time.monotonic() - started < 2.0
    assert source.paused  # resumed by intake once it takes the free slot, not here


async def test_wait_freed_gives_up_at_the_timeout() -> None:
    slots, _, _ = limiter(1)
    await slots.acquire()
    started = time.monotonic()
    await slots.wait_freed(0.05)
    assert 0.04 <= time.monotonic() - started < 2.0
    assert slots.full


def test_shared_deadline_gives_each_step_what_is_left_within_bounds() -> None:
    roomy = SharedDeadline(total_s=30.0, step_max_s=1.0, step_min_s=0.05)
    assert roomy.step() == 1.0  # capped: one hung step leaves time to the others
    tight = SharedDeadline(total_s=0.3, step_max_s=5.0, step_min_s=0.05)
    assert 0.05 <= tight.step() <= 0.3  # what is left of the total
    time.sleep(0.35)
    assert tight.step() == 0.05  # spent: every step still gets its minimum


def test_partitions_assigned_while_paused_are_paused_too() -> None:
    slots, source, _ = limiter(1)
    slots.assigned()
    assert not source.paused  # intake running: new partitions are fetched
    slots.set_paused(True)
    source.resume()  # what newly assigned partitions are: not paused
    slots.assigned()
    assert source.paused
    assert slots.paused


def test_the_reading_clock_stands_still_while_intake_is_paused() -> None:
    now = [100.0]
    slots = InFlight(1, MemorySource(), Metrics(CollectorRegistry()), clock=lambda: now[0])
    start = slots.reading_clock()
    now[0] += 5
    slots.set_paused(True)
    now[0] += 60  # nothing read meanwhile: no session goes quiet on it
    assert slots.reading_clock() - start == 5
    slots.set_paused(False)
    now[0] += 2
    assert slots.reading_clock() - start == 7
    slots.set_paused(True)
    now[0] += 1
    assert slots.reading_clock() - start == 7
