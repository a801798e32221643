"""KafkaSource reads ahead of intake (``kafka.prefetch_bytes``) on a real broker and a real
consumer group: nothing is lost or handed out twice in one member's life, positions count
from what was handed out, and a rebalance drops what was read ahead from partitions that go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from evalstream.config import KafkaSettings
from evalstream.sources.base import TP
from evalstream.sources.kafka import KafkaSource
from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, unique

pytestmark = pytest.mark.integration

N = 3_000


class _Members:
    """Rebalance handler: counts revokes."""

    def __init__(self) -> None:
        self.revokes = 0

    async def on_assigned(self, tps: Sequence[TP]) -> None:
        pass

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        self.revokes += 1


def settings(broker: Broker, group: str) -> KafkaSettings:
    # Small polls and a read-ahead that holds the whole topic (180 KB), so the first member
    # holds records of both partitions ahead of intake when the other joins.
    return KafkaSettings(bootstrap_servers=broker.bootstrap, group_id=group,
                         session_timeout_ms=6_000, max_poll_records=20,
                         prefetch_bytes=1_000_000)


async def test_read_ahead_hands_out_only_the_current_assignment_s_records(
        broker: Broker) -> None:
    topic = unique("read-ahead")
    await create_topics(broker.bootstrap, [topic], partitions=2)
    ends = await produce(broker.bootstrap, topic, [b"%06d" % i * 10 for i in range(N)])
    assert sum(ends.values()) == N
    group = unique("read-ahead-group")
    a, b = KafkaSource(settings(broker, group), [topic]), KafkaSource(settings(broker, group),
                                                                     [topic])
    a_members, b_members = _Members(), _Members()
    seen: dict[str, dict[TP, list[int]]] = {"a": {}, "b": {}}
    strays: list[tuple[str, TP]] = []

    async def take(name: str, source: KafkaSource) -> int:
        got = await source.poll(0.2, 20)
        for (t, p), records in got.items():
            if (t, p) not in source.assignment():
                strays.append((name, (t, p)))
            seen[name].setdefault((t, p), []).extend(r.offset for r in records)
        return sum(len(r) for r in got.values())

    await a.start(a_members)
    try:
        async with asyncio.timeout(60):
            while not seen["a"]:
                await take("a", a)
        # One poll of 20 records handed out, and aiokafka's buffer read ahead: positions
        # say where intake goes on from, not how far the consumer fetched.
        tps = [(topic, 0), (topic, 1)]
        handed = {tp: seen["a"][tp][-1] + 1 if tp in seen["a"] else 0 for tp in tps}
        async with asyncio.timeout(30):  # until the first fetch response has both
            while len(await a.positions(tps)) < 2:
                await asyncio.sleep(0.05)
        assert await a.positions(tps) == handed

        await b.start(b_members)
        async with asyncio.timeout(90):
            # Both members poll until the group settled and each partition was read to its
            # end by its owner after that.
            while True:
                await take("a", a)
                await take("b", b)
                settled = a_members.revokes and len(a.assignment()) == 1 == len(b.assignment())
                if settled and all(
                        (seen[name].get(tp) or [-1])[-1] + 1 >= ends[tp[1]]
                        for name, source in (("a", a), ("b", b))
                        for tp in source.assignment()):
                    break
    finally:
        await b.stop()
        await a.stop()

    assert strays == []
    # A member hands each offset out once per assignment, in order; across the rebalance
    # it starts again from the committed offset (none here: from the start).
    for name in ("a", "b"):
        for tp, offsets in seen[name].items():
            runs = [0] + [i for i in range(1, len(offsets)) if offsets[i] <= offsets[i - 1]]
            for start, stop in zip(runs, [*runs[1:], len(offsets)], strict=True):
                run = offsets[start:stop]
                assert run == list(range(run[0], run[0] + len(run))), (name, tp)
    everything = {tp: set() for tp in [(topic, 0), (topic, 1)]}  # type: dict[TP, set[int]]
    for name in ("a", "b"):
        for tp, offsets in seen[name].items():
            everything[tp].update(offsets)
    assert {tp: len(v) for tp, v in everything.items()} == {
        (topic, p): end for p, end in ends.items()}
