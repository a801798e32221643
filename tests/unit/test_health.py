"""Consumer-lag gauges follow the partitions currently assigned."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace
from typing import Any, cast

import pytest
import structlog

from evalstream.app.health import NO_PARTITIONS, not_ready_reason, watch_lag, watch_readiness
from evalstream.metrics import Metrics
from evalstream.sources.base import Source


class LagSource:
    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {("in", 0): 50_000, ("in", 1): 20}
        self.calls = 0

    async def lag(self, unfinished: Any = None) -> dict[tuple[str, int], int]:
        self.calls += 1
        return dict(self.assigned)


async def _polls(source: LagSource, n: int) -> None:
    start = source.calls
    async with asyncio.timeout(5):
        while source.calls < start + n:
            await asyncio.sleep(0.001)


def lag(metrics: Metrics, partition: str) -> float | None:
    return metrics.registry.get_sample_value("evalstream_consumer_lag_messages",
                                             {"topic": "in", "partition": partition})


async def test_revoked_partitions_stop_being_exported() -> None:
    metrics, source = Metrics(), LagSource()
    task = asyncio.create_task(watch_lag(source, metrics, interval_s=0.001))  # type: ignore[arg-type]
    try:
        await _polls(source, 2)
        assert lag(metrics, "0") == 50_000
        source.assigned = {("in", 1): 0}  # rebalance: partition 0 went to another replica
        await _polls(source, 2)
        assert lag(metrics, "0") is None
        assert lag(metrics, "1") == 0
        source.assigned = {("in", 0): 7, ("in", 1): 0}  # and came back
        await _polls(source, 2)
        assert lag(metrics, "0") == 7
    finally:
        task.cancel()


@pytest.mark.parametrize(("reason", "warned"), [
    (NO_PARTITIONS, True), ("the broker did not answer the last check", False)])
async def test_the_missing_partitions_warning_waits_for_a_broker_that_answers(
        reason: str, warned: bool) -> None:
    # During a broker outage the worker is unready too; "no partitions assigned" (a topic
    # or replica-count problem) would send the operator the wrong way.
    metrics = Metrics()
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(watch_readiness(
            lambda: reason, metrics, None, ["in"], warn_after_s=0.0))
        await asyncio.sleep(1.2)  # the watcher looks once a second
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert ("no_partitions_assigned" in [e["event"] for e in logs]) is warned
    assert metrics.registry.get_sample_value("evalstream_ready") == 0
    # Why it is not ready is logged, once (the kubelet does not show the /readyz body).
    changes = [e for e in logs if e["event"] == "readiness"]
    assert [(e["ready"], e["reason"]) for e in changes] == [(False, reason)]


async def test_each_change_of_readiness_is_logged_once() -> None:
    states = iter([None, None, NO_PARTITIONS, NO_PARTITIONS, "stopping"])
    current: list[str | None] = [None]

    def not_ready() -> str | None:
        current[0] = next(states, current[0])
        return current[0]

    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(watch_readiness(
            not_ready, Metrics(), asyncio.Event(), ["in"], warn_after_s=60.0))
        # It looks once a second while ready, then every 50 ms: ~2 s for these five.
        for _ in range(50):
            await asyncio.sleep(0.1)
            if current[0] == "stopping":
                break
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    changes = [(e["ready"], e["reason"]) for e in logs if e["event"] == "readiness"]
    assert changes == [(True, None), (False, NO_PARTITIONS), (False, "stopping")]


@pytest.mark.parametrize(("stopping", "started", "connected", "assigned", "reason"), [
    (True, True, True, True, "stopping"),  # stopping comes first, whatever else holds
    (False, False, True, True, "connecting to the broker"),
    (False, True, False, True, "the broker did not answer the last check"),
    (False, True, True, False, NO_PARTITIONS),
    (False, True, True, True, None),
])
def test_not_ready_reason_names_the_first_thing_missing(
        stopping: bool, started: bool, connected: bool, assigned: bool,
        reason: str | None) -> None:
    source = SimpleNamespace(connected=connected,
                             assignment=lambda: {("in", 0)} if assigned else set())
    assert not_ready_reason(stopping=stopping, started=started,
                            source=cast(Source, source)) == reason
