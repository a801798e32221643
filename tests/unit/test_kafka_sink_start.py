"""KafkaSink.start: a missing output topic is reported at start-up, by name."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import UnknownTopicOrPartitionError

from evalstream.config import KafkaSettings, TopicSettings
from evalstream.errors import SinkError
from evalstream.sinks import kafka as sink_module
from evalstream.sinks.kafka import KafkaSink


class _Producer:
    """Stands in for AIOKafkaProducer on a broker where only ``existing`` topics exist
    (the real broker in the test suite auto-creates topics, so it cannot show this)."""

    existing: frozenset[str] = frozenset()
    stopped = False

    def __init__(self, **_: Any) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        type(self).stopped = True

    async def partitions_for(self, topic: str) -> set[int]:
        if topic not in self.existing:
            raise UnknownTopicOrPartitionError()
        return {0}


async def test_a_missing_output_topic_fails_start_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    topics = TopicSettings(results="res", dead_letter="dlq", alerts="alerts")
    _Producer.existing = frozenset({"res"})
    with pytest.raises(SinkError, match=r"output topic 'dlq' is not available "
                                        r"\(UnknownTopicOrPartitionError\)"):
        await KafkaSink(KafkaSettings(), topics).start()
    assert _Producer.stopped  # the half-started producer is closed

    _Producer.existing = frozenset({"res", "dlq"})  # alerts are only needed with drift on
    sink = KafkaSink(KafkaSettings(), topics)
    await sink.start()
    await sink.stop()


async def test_the_otel_results_topic_is_checked_when_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    _Producer.existing = frozenset({"res", "dlq"})
    topics = TopicSettings(results="res", dead_letter="dlq", otel_results="otel")
    with pytest.raises(SinkError, match=r"output topic 'otel' is not available"):
        await KafkaSink(KafkaSettings(), topics).start()

    _Producer.existing = frozenset({"res", "dlq", "otel"})
    sink = KafkaSink(KafkaSettings(), topics)
    await sink.start()
    await sink.stop()
