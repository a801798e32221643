"""Must-show 5: a slow evaluator never lets in-flight work exceed ``max_in_flight``; intake
pauses instead (real broker, metrics read from the worker's own registry)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from tests.integration.slow_evaluator import MODULE as SLOW
from tests.integration.workerkit import (
    Topics,
    committed,
    event_json,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

MAX_IN_FLIGHT = 8


async def test_slow_evaluator_is_bounded_by_max_in_flight(broker: Broker) -> None:
    topics = Topics.fresh("backpressure")
    await topics.create(broker.bootstrap, partitions=2)
    settings = settings_for(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"max_in_flight": MAX_IN_FLIGHT},
        routes=[{"name": "slow", "evaluators": [
            {"evaluator": "test_slow", "params": {"delay_s": 0.05}},
            {"evaluator": "refusal"}]}])
    ends = await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(120)])
    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)
    samples: list[float] = []

    async def drained() -> bool:
        samples.append(registry.get_sample_value("evalstream_in_flight_evaluations") or 0.0)
        got = await committed(broker.bootstrap, topics.group, topics.inputs, 2)
        return all(got[p] >= end for p, end in ends.items())

    async with running(worker):
        await wait_for(drained, timeout=60, what="all 120 events to be committed", interval=0.1)

    peak = registry.get_sample_value("evalstream_in_flight_evaluations_peak")
    assert peak == MAX_IN_FLIGHT  # the bound was reached...
    assert max(samples) <= MAX_IN_FLIGHT  # ...and never exceeded
    assert (registry.get_sample_value("evalstream_backpressure_pauses_total") or 0) >= 1
    published = await read_all(broker.bootstrap, topics.results, expect=240, timeout=30)
    assert len(published) == 240  # both evaluators, every event: nothing dropped by pausing
