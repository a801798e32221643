"""A broker that stops answering while the worker runs: readiness follows it, both ways.

aiokafka reconnects by itself and keeps the assignment while the broker is gone, so the
worker asks the broker every few seconds (``KafkaSource.check``). The outage is a frozen
broker process (SIGSTOP), on a broker of this test's own, so its data survives it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import structlog
from prometheus_client import CollectorRegistry

from evalstream.app import connect as connect_module
from evalstream.app import worker as worker_module
from evalstream.app.worker import Worker
from tests.integration.workerkit import Topics, running, settings_for, wait_for
from tests.support.broker import Broker, run_broker

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


async def test_a_broker_that_never_answers_is_given_up_on_at_connect_timeout(
        broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TLS client at a plaintext listener hears nothing back: aiokafka alone would wait its
    request timeout (40 s) per attempt, whatever ``kafka.connect_timeout_s`` says."""
    monkeypatch.setattr(connect_module, "_CONNECT_ATTEMPT_MIN_S", 1.0)
    topics = Topics.fresh("notls")
    settings = settings_for(broker.bootstrap, topics, kafka={
        "security_protocol": "SSL", "connect_timeout_s": 2})
    with structlog.testing.capture_logs() as logs:
        code = await asyncio.wait_for(Worker(settings, registry=CollectorRegistry()).run(), 20)
    assert code == 1
    [failed] = [e for e in logs if e["event"] == "worker_start_failed"]
    assert "no answer from Kafka" in failed["error"]
