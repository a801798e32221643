"""``sampling.key: message_key`` on the real broker: messages keyed by trace id are sampled
on their key before decoding, pick exactly the events trace_id sampling picks, and every
message still ends as a result, a counted ``sampling`` skip or a dead letter, with the
group's committed offsets at the end."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import SamplingSettings
from evalstream.events import TraceEvent
from evalstream.sampling import Sampler
from tests.integration.workerkit import (
    Topics,
    committed,
    event_json,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

PARTITIONS = 4
RATE = 0.05
N = 2000


async def test_message_key_sampling_matches_trace_id_sampling(broker: Broker) -> None:
    topics = Topics.fresh("keysample")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(broker.bootstrap, topics,
                            sampling={"key": "message_key", "rate": RATE})
    by_trace = Sampler(SamplingSettings(key="trace_id", rate=RATE))

    def chosen(trace_id: str) -> bool:
        event = TraceEvent(event_id="any", trace_id=trace_id)
        return by_trace.sampled(by_trace.fraction(event), RATE)

    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    expected: set[str] = set()
    dead = unread = 0
    for i in range(N):
        trace_id = f"trace-{i}"  # event_json's trace id: the key is the trace id
        keys.append(trace_id.encode())
        if i % 100 == 7 or (i % 5 == 0 and chosen(trace_id)):
            # Malformed: dead-lettered only when its key is sampled; otherwise never read.
            values.append(b"{not json")
            dead += chosen(trace_id)
            unread += not chosen(trace_id)
        else:
            values.append(event_json(i, refuse=i % 10 == 0))
            if chosen(trace_id):
                expected.add(f"e{i}")
    ends = await produce(broker.bootstrap, topics.inputs, values, keys=keys)
    assert sum(ends.values()) == N
    assert 40 < len(expected) < 170
    assert dead >= 3  # both fates of a malformed message are exercised
    assert unread >= 10

    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)

    async def reached() -> bool:
        got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
        return all(got.get(p, 0) >= end for p, end in ends.items())

    async with running(worker):
        await wait_for(reached, timeout=60, what="committed offsets to reach the end")

    published = await results(broker.bootstrap, topics.results, expect=len(expected))
    assert {str(r["event_id"]) for r in published} == expected
    assert all(r["sample_rate"] == RATE for r in published)
    skipped = registry.get_sample_value("evalstream_events_skipped_total",
                                        {"reason": "sampling"})
    assert skipped is not None
    dead_letters = await read_all(broker.bootstrap, topics.dead_letter, expect=dead,
                                  timeout=10, idle=1.0)
    assert len(dead_letters) == dead
    assert len(published) + skipped + dead == N
    # Unsampled messages were never decoded: only the sampled valid ones were.
    assert registry.get_sample_value("evalstream_events_decoded_total",
                                     {"format": "flat_json"}) == len(expected)
