"""A revoke ends once the work that started is done, even when intake was waiting for a
slot long enough to poll the paused consumer meanwhile.

Intake waiting mid-batch for a slot polls the consumer every second
(``MessagePath._keep_polled``) so aiokafka keeps it in the group. During a rebalance
aiokafka's ``getmany`` waits for the new assignment whatever its timeout, and the new
assignment waits for this worker's revoke; the revoke waits for the message whose
evaluations never started, which only intake can give up, and intake was the one waiting
in ``getmany``. So the revoke sat out its whole deadline (``session_timeout_ms`` / 2, 15 s
by default) on every rebalance under load, holding up the whole group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.offsets import TP
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
from tests.support.kafka import produce

pytestmark = pytest.mark.integration

EVENTS = 20
DELAY_S = 2.5  # longer than intake's wait for a slot between two keep-alive polls (1 s)


class _TimedWorker(Worker):
    """Records how long each revoke took."""

    revokes: list[float]

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        await super().on_revoked(tps)
        self.revokes.append(loop.time() - began)


async def test_a_revoke_does_not_wait_out_its_deadline_for_work_that_never_started(
        broker: Broker) -> None:
    topics = Topics.fresh("keeppoll")
    await topics.create(broker.bootstrap, partitions=2)
    settings = settings_for(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"max_in_flight": 1, "commit_interval_s": 0.2, "shutdown_timeout_s": 30},
        # The revoke's deadline: session_timeout_ms / 2 = 15 s.
        kafka={"session_timeout_ms": 30_000, "max_poll_records": 500},
        routes=[{"name": "slow", "evaluators": [
            {"evaluator": "test_slow", "params": {"delay_s": DELAY_S}}]}])
    await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(EVENTS)])
    a = _TimedWorker(settings, registry=CollectorRegistry())
    a.revokes = []
    b = Worker(settings, registry=CollectorRegistry())
    async with running(a, timeout=60):
        # a holds a batch and waits for its only slot in the middle of it.
        await wait_for(lambda: a.in_flight == 1 and a.tracker.pending() > 1, timeout=20,
                       what="a to wait for a slot mid-batch")
        async with running(b, timeout=60):
            await wait_for(lambda: a.revokes, timeout=40, what="a's revoke")
            # The one evaluation under way takes DELAY_S; the rest never started.
            assert a.revokes[0] < DELAY_S + 4, a.revokes
            await wait_for(lambda: a.source.assignment() and b.source.assignment(),
                           timeout=30, what="both workers to hold partitions")
    got = await committed(broker.bootstrap, topics.group, topics.inputs, 2)
    assert sum(got.values()) < EVENTS  # the rest is redelivered, not committed
