"""A broker that stops answering while the worker runs: readiness follows it, both ways.

aiokafka reconnects by itself and keeps the assignment while the broker is gone, so the
worker asks the broker every few seconds (``KafkaSource.check``). The outage is a frozen
broker process (SIGSTOP), on a broker of this test's own, so its data survives it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app import worker as worker_module
from evalstream.app.worker import Worker
from tests.integration.workerkit import Topics, running, settings_for, wait_for
from tests.support.broker import run_broker

pytestmark = pytest.mark.integration


async def test_readiness_follows_the_broker_through_an_outage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "_CONNECTION_CHECK_S", 0.3)
    with run_broker(tmp_path) as own:
        topics = Topics.fresh("outage")
        await topics.create(own.bootstrap, partitions=1)
        settings = settings_for(own.bootstrap, topics, routes=[
            {"name": "main", "evaluators": [{"evaluator": "refusal"}]}])
        worker = Worker(settings, registry=CollectorRegistry())

        def ready_gauge() -> float | None:
            return worker.metrics.registry.get_sample_value("evalstream_ready")

        async with running(worker):
            await wait_for(lambda: ready_gauge() == 1, 5, "evalstream_ready 1")
            own.pause()
            try:
                # Was ready (200 on /readyz) for the whole outage: connected meant "started".
                await wait_for(lambda: not worker.is_ready(), 15,
                               "not ready while the broker is frozen")
                await wait_for(lambda: ready_gauge() == 0, 5, "evalstream_ready 0")
            finally:
                own.resume()
            await wait_for(worker.is_ready, 45, "ready again once the broker answers")
