"""Small aiokafka helpers for tests: create topics, produce, read a whole topic."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
        )
    finally:
        await admin.close()


async def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes | None],
    keys: Iterable[bytes | None] | None = None,
    headers: Iterable[list[tuple[str, bytes]] | None] | None = None,
) -> dict[int, int]:
    """Produce values (with keys and Kafka headers, when given, by position); return the
    highest offset written per partition (plus one)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=8 * 1024 * 1024,
                                linger_ms=5)
    await producer.start()
    ends: dict[int, int] = {}
    try:
        key_list = list(keys) if keys is not None else None
        header_list = list(headers) if headers is not None else None
        futures = []
        for i, value in enumerate(values):
            key = key_list[i] if key_list is not None else None
            extra = header_list[i] if header_list is not None else None
            futures.append(await producer.send(topic, value=value, key=key, headers=extra))
        for meta in await asyncio.gather(*futures):
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    finally:
        await producer.stop()
    return ends


async def read_all(bootstrap: str, topic: str, *, expect: int | None = None,
                   timeout: float = 30.0, idle: float = 2.0) -> list[object]:
    """Read a topic from the start until ``expect`` records arrived, or it stays idle."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)
    await consumer.start()
    records: list[object] = []
    try:
        parts = consumer.partitions_for_topic(topic)
        for _ in range(50):
            if parts:
                break
            await asyncio.sleep(0.1)
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic)
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts or [])])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = loop.time()
        while loop.time() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            got = [r for recs in batch.values() for r in recs]
            if got:
                records.extend(got)
                last = loop.time()
            if expect is not None and len(records) >= expect:
                break
            if expect is None and loop.time() - last > idle:
                break
    finally:
        await consumer.stop()
    return records
