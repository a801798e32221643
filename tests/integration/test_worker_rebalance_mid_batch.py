"""A rebalance while intake waits for a slot in the middle of a batch loses nothing.

The message path drops the rest of a batch taken before a rebalance, and the batches its
keep-alive polls stashed meanwhile (``MessagePath.rebalanced``): none of them is tracked,
so nothing of them is committed. That is safe only because aiokafka gives every partition
of a new assignment (those assigned to the same member again included) a fresh position
taken from the group's committed offset, so the dropped records are fetched again. This
checks that on the real broker: every event gets its result and every offset is committed.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from tests.integration.slow_evaluator import MODULE as SLOW
from tests.integration.workerkit import (
    Topics,
    committed,
    event_json,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce

pytestmark = pytest.mark.integration

PARTITIONS = 2
EVENTS = 160


async def test_a_rebalance_while_intake_waits_mid_batch_loses_nothing(broker: Broker) -> None:
    topics = Topics.fresh("midbatch")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"max_in_flight": 2, "commit_interval_s": 0.2},
        kafka={"session_timeout_ms": 3000, "max_poll_records": 500},
        routes=[{"name": "slow", "evaluators": [
            {"evaluator": "test_slow", "params": {"delay_s": 0.03}}]}])
    ends = await produce(broker.bootstrap, topics.inputs,
                         [event_json(i) for i in range(EVENTS)])
    a = Worker(settings, registry=CollectorRegistry())
    b = Worker(settings, registry=CollectorRegistry())
    async with running(a):
        # a holds a whole batch and waits for slots in the middle of it.
        await wait_for(lambda: a.in_flight == 2 and a.tracker.pending() > 2, timeout=20,
                       what="a to wait for a slot mid-batch")
        async with running(b, timeout=30):
            await wait_for(lambda: a.source.assignment() and b.source.assignment(),
                           timeout=30, what="both workers to hold partitions")

            async def at_end() -> bool:
                got = await committed(broker.bootstrap, topics.group, topics.inputs,
                                      PARTITIONS)
                return all(got[p] >= end for p, end in ends.items())
            await wait_for(at_end, timeout=60, what="every message committed")
    published = await results(broker.bootstrap, topics.results, expect=EVENTS)
    assert {str(r["event_id"]) for r in published} == {f"e{i}" for i in range(EVENTS)}
