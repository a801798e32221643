"""The broker the suites depend on starts and round-trips a message."""

from __future__ import annotations

import pytest

from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, read_all, unique

pytestmark = pytest.mark.integration


async def test_broker_round_trip(broker: Broker) -> None:
    topic = unique("smoke")
    await create_topics(broker.bootstrap, [topic], partitions=2)
    await produce(broker.bootstrap, topic, [b"a", b"b", b"c"], keys=[b"1", b"2", b"3"])
    records = await read_all(broker.bootstrap, topic, expect=3, timeout=20)
    assert sorted(r.value for r in records) == [b"a", b"b", b"c"]  # type: ignore[attr-defined]
