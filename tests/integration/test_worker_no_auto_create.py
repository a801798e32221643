"""Topics missing on a broker that does not create them (production Kafka, as a rule).

The Tansu test broker creates any topic a metadata request names, unless the request says
not to: aiokafka always asks for creation, so these tests make its metadata requests ask
not to (``allow_auto_topic_creation: false``), which Tansu honours. The rest is the real
client against the real broker.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiokafka.client
import pytest
import structlog
from aiokafka.protocol.metadata import MetadataRequest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from tests.integration.workerkit import Topics, settings_for
from tests.support.broker import Broker
from tests.support.kafka import create_topics

pytestmark = pytest.mark.integration


class _NoAutoCreate(MetadataRequest):
    """A metadata request that does not create the topics it names."""

    def __init__(self, topics: list[str] | None = None,
                 allow_auto_topic_creation: bool | None = None) -> None:
        super().__init__(topics, allow_auto_topic_creation=False)


@pytest.fixture
def no_auto_create(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiokafka.client, "MetadataRequest", _NoAutoCreate)


ROUTES: list[dict[str, Any]] = [{"name": "main", "evaluators": [{"evaluator": "refusal"}]}]


@pytest.mark.usefixtures("no_auto_create")
async def test_a_missing_dead_letter_topic_is_named_when_start_up_gives_up(
        broker: Broker) -> None:
    # aiokafka waits its request_timeout_ms (40 s) for a topic that is not there. Start-up
    # bounded that wait by what was left of connect_timeout_s and blamed the network
    # ("no answer from Kafka ... is kafka.security_protocol the listener's"), never saying
    # output_topic_missing when connect_timeout_s was under 40 s: on-call looked at TLS.
    topics = Topics.fresh("nodlq")
    await create_topics(broker.bootstrap, [topics.inputs, topics.results], partitions=1)
    settings = settings_for(broker.bootstrap, topics, routes=ROUTES,
                            kafka={"connect_timeout_s": 8})
    with structlog.testing.capture_logs() as logs:
        code = await asyncio.wait_for(Worker(settings, registry=CollectorRegistry()).run(), 30)
    assert code == 1
    missing = [e for e in logs if e["event"] == "output_topic_missing"]
    assert missing
    assert all(topics.dead_letter in e["error"] for e in missing)
    [failed] = [e for e in logs if e["event"] == "worker_start_failed"]
    assert topics.dead_letter in failed["error"]
    assert "no answer from Kafka" not in failed["error"]
