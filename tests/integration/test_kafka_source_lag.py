"""KafkaSource.lag keeps counting while the worker has paused its partitions.

A paused partition is not fetched, so the highwater aiokafka learns from fetch responses
stands still. The worker pauses when every evaluation slot is taken (a slow or rate-limited
judge), which is exactly when ``evalstream_consumer_lag_messages`` (and the
EvalstreamConsumerLagHigh alert on it) must show the backlog growing, not 0.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from evalstream.config import KafkaSettings
from evalstream.sources.kafka import KafkaSource
from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, unique

pytestmark = pytest.mark.integration


async def test_lag_of_a_paused_partition_grows_with_the_backlog(broker: Broker) -> None:
    topic = unique("lag-paused")
    await create_topics(broker.bootstrap, [topic])
    await produce(broker.bootstrap, topic, [b"{}"] * 5)
    # The source's own consumer, assigned instead of subscribed: the group join (seconds on
    # this broker) is not what is tested; lag(), pause and the broker's answers are.
    source = KafkaSource(KafkaSettings(bootstrap_servers=broker.bootstrap), [topic])
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    source._consumer = consumer
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        seen = 0
        async with asyncio.timeout(20):
            while seen < 5:
                seen += sum(len(r) for r in (await source.poll(0.5, 100)).values())
        assert await source.lag() == {(topic, 0): 0}
        # All five fetched, from offset 2 on not done (waiting for a slot, in flight): the
        # worker's lowest unfinished offset counts, the position only where it has none.
        assert await source.lag(lambda tp: 2) == {(topic, 0): 3}
        assert await source.lag(lambda tp: None) == {(topic, 0): 0}

        source.pause()  # every evaluation slot taken
        for _ in range(3):  # one record per batch: Tansu's end offset is exact then
            await produce(broker.bootstrap, topic, [b"{}"])
        await source.poll(0.3, 100)  # the consumer keeps polling while paused
        assert await source.lag() == {(topic, 0): 3}
        assert await source.lag(lambda tp: 2) == {(topic, 0): 6}  # the end offset counts

        source.resume()
        async with asyncio.timeout(20):
            while seen < 8:
                seen += sum(len(r) for r in (await source.poll(0.5, 100)).values())
        assert await source.lag() == {(topic, 0): 0}
    finally:
        await source.stop()
