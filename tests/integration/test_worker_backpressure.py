"""Must-show 5: a slow evaluator never lets in-flight work exceed ``max_in_flight``; intake
pauses instead (real broker, metrics read from the worker's own registry)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import dump_json
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


def _quick_json(i: int) -> bytes:
    return dump_json({"event_id": f"q{i}", "trace_id": f"q-{i}", "input": "Hi?",
                      "output": "Hello.", "app": "quick"})


async def test_lag_gauge_counts_the_messages_not_done_while_every_slot_is_taken(
        broker: Broker) -> None:
    # Found by an outage test: counted from the consumer's position, the gauge read 0 while
    # the fetched messages waited for a slot (all of them fit one poll here), though the
    # committed offsets KEDA reads showed them. Each partition starts with messages another
    # route finishes at once, then slow ones that hold every slot for the whole test.
    topics = Topics.fresh("lag-slots")
    await topics.create(broker.bootstrap, partitions=2)
    settings = settings_for(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"max_in_flight": MAX_IN_FLIGHT, "shutdown_timeout_s": 0.5},
        routes=[{"name": "slow", "match": {"app": ["support-bot"]},
                 "evaluators": [{"evaluator": "test_slow", "params": {"delay_s": 120}}]},
                {"name": "quick", "match": {"app": ["quick"]},
                 "evaluators": [{"evaluator": "refusal"}]}])
    quick = await produce(broker.bootstrap, topics.inputs, [_quick_json(i) for i in range(10)],
                          keys=[f"q{i}".encode() for i in range(10)])
    slow = await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(60)],
                         keys=[f"s{i}".encode() for i in range(60)])
    produced = {p: max(quick.get(p, 0), slow.get(p, 0)) for p in range(2)}
    worker = Worker(settings, registry=CollectorRegistry())

    def gauges() -> dict[int, float | None]:
        return {p: worker.metrics.registry.get_sample_value(
            "evalstream_consumer_lag_messages", {"topic": topics.inputs, "partition": str(p)})
            for p in range(2)}

    done: dict[int, int] = {}

    async def gauge_is_produced_minus_done() -> bool:
        # Done: what the worker committed, i.e. the quick messages handled before intake
        # stopped at the first slow one with no slot free. Those of the partition it had
        # not reached are fetched but not done, and count.
        done.update(await committed(broker.bootstrap, topics.group, topics.inputs, 2))
        return gauges() == {p: produced[p] - done[p] for p in range(2)}

    async with running(worker):
        await wait_for(lambda: worker.in_flight == MAX_IN_FLIGHT and worker.slots.paused,
                       20, "every slot taken by the slow evaluator, intake paused")
        try:
            await wait_for(gauge_is_produced_minus_done, 10, "the lag gauges", interval=0.2)
        except AssertionError:
            raise AssertionError(f"lag gauges read {gauges()}, not produced {produced} minus "
                                 f"done {done}") from None
        assert worker.in_flight == MAX_IN_FLIGHT  # nothing slow finished meanwhile
    assert 0 < sum(done.values()) <= 10  # only quick messages are done...
    assert sum(produced.values()) - sum(done.values()) >= 60  # ...every slow one counted
    published = await read_all(broker.bootstrap, topics.results, expect=sum(done.values()),
                               timeout=10)
    assert len(published) == sum(done.values())  # one result per message done
