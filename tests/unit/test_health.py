"""Consumer-lag gauges follow the partitions currently assigned."""

from __future__ import annotations

import asyncio

from evalstream.app.health import watch_lag
from evalstream.metrics import Metrics


class LagSource:
    def __init__(self) -> None:
        self.assigned: dict[tuple[str, int], int] = {("in", 0): 50_000, ("in", 1): 20}
        self.calls = 0

    async def lag(self) -> dict[tuple[str, int], int]:
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
