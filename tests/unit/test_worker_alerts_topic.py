"""The worker checks the alerts topic at start-up when drift alerts will be published.

Without it, a broker with topic auto-creation off and no alerts topic runs fine for hours,
then the first drift alert waits out the producer's metadata timeout and stops the worker
(exit 1), on every restart once the new baseline drifts again.
"""

from __future__ import annotations

from typing import Any

import pytest
import structlog
from aiokafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError

from evalstream.app.worker import Worker
from evalstream.errors import SinkError
from evalstream.sinks import kafka as sink_module
from tests.unit.pipeline_doubles import JUDGES, settings


class _Producer:
    """AIOKafkaProducer on a broker (auto-creation off) holding only results and dlq (the
    real broker in the test suite auto-creates topics, so it cannot show this)."""

    def __init__(self, **_: Any) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def partitions_for(self, topic: str) -> set[int]:
        if topic not in ("res", "dlq"):
            raise UnknownTopicOrPartitionError()
        return {0}


TOPICS = {"results": "res", "dead_letter": "dlq", "alerts": "alerts"}


async def test_drift_on_needs_the_alerts_topic_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    worker = Worker(settings(topics=TOPICS, drift={"enabled": True}), judges=JUDGES)
    with pytest.raises(SinkError, match=r"output topic 'alerts' is not available"):
        await worker.sink.start()


async def test_drift_off_does_not_need_the_alerts_topic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    worker = Worker(settings(topics=TOPICS), judges=JUDGES)  # drift off
    await worker.sink.start()
    await worker.sink.stop()


async def test_a_missing_output_topic_is_logged_as_such_while_start_up_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    worker = Worker(settings(topics=TOPICS, drift={"enabled": True},
                             kafka={"bootstrap_servers": "127.0.0.1:1",
                                    "connect_timeout_s": 0.6}), judges=JUDGES)
    with structlog.testing.capture_logs() as logs:
        assert await worker.run() == 1  # still missing when the time is up
    events = [e["event"] for e in logs]
    # The fix is to create the topic, not to look at the network.
    assert "output_topic_missing" in events
    assert "broker_unreachable" not in events


class _Unauthorised(_Producer):
    """A broker whose ACLs do not let this producer describe (or write) the topics."""

    async def partitions_for(self, topic: str) -> set[int]:
        raise TopicAuthorizationFailedError(topic)


async def test_an_output_topic_not_authorised_is_not_called_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # "create it, or let the broker auto-create topics" sent on-call to create a topic
    # that exists, when the fix is an ACL.
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Unauthorised)
    worker = Worker(settings(topics=TOPICS), judges=JUDGES)
    with pytest.raises(SinkError, match=r"not authorised") as caught:
        await worker.sink.start()
    assert "create it" not in str(caught.value)
