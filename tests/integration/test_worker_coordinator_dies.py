"""aiokafka's group coordination task ended by an unexpected error: the worker stops.

aiokafka wraps an unexpected exception in its coordination routine (a client bug; once, a
request timeout, aio-libs/aiokafka#376) in a KafkaError, hands it to the waiting fetch,
and the routine is gone for good: no heartbeat, no rejoin, and every later fetch raises
the same error. Taken as transient, the worker logged ``fetch_failed`` twice a second for
ever, consumed nothing, and /readyz said ready. A restart is the only cure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.sources.kafka import KafkaSource
from tests.integration.workerkit import Topics, running, settings_for
from tests.support.broker import Broker

pytestmark = pytest.mark.integration


async def test_a_dead_coordination_task_stops_the_worker(broker: Broker) -> None:
    topics = Topics.fresh("coord")
    await topics.create(broker.bootstrap, partitions=1)
    settings = settings_for(broker.bootstrap, topics, routes=[
        {"name": "main", "evaluators": [{"evaluator": "refusal"}]}])
    worker = Worker(settings, registry=CollectorRegistry())
    with structlog.testing.capture_logs() as logs:
        async with running(worker) as run:
            assert isinstance(worker.source, KafkaSource)
            coordinator = worker.source._consumer._coordinator  # type: ignore[union-attr]

            async def crash(*_: Any, **__: Any) -> None:
                raise RuntimeError("a client bug")

            coordinator.ensure_active_group = crash
            coordinator.request_rejoin()
            code = await asyncio.wait_for(asyncio.shield(run), 15)
    assert code == 1
    [failed] = [e for e in logs if e["event"] == "worker_failed"]
    assert "coordination" in failed["error"]
