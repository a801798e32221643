"""Check whether a broker answers ListOffsets by timestamp as Kafka does.

A backfill (a new consumer group starting at a time, ``offsets_for_times``) is only as
right as this answer. Kafka returns, per partition, the first offset whose record
timestamp (CreateTime here) is >= the query, or none (offset -1, which aiokafka returns as
None) when no record is at or after it. Each case below prints what Kafka answers and what
the broker answered; the exit status is 1 when any differs.

Run from the repository root: ``python tools/probe_offsets_for_times.py`` starts the test
suite's Tansu broker; ``--bootstrap host:port`` probes another broker (e.g. Apache Kafka).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

#: 2020-01-01T00:00:00Z in milliseconds: CreateTimes long before the records are written,
#: as in a topic whose producers stamp event time, or one mirrored with its timestamps.
_PAST = 1_577_836_800_000
_HOUR_MS = 3_600_000


async def _topic(bootstrap: str) -> TopicPartition:
    name = f"probe-{uuid.uuid4().hex[:10]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    return TopicPartition(name, 0)


async def _produce(producer: AIOKafkaProducer, tp: TopicPartition,
                   timestamps: list[int | None]) -> None:
    for ts in timestamps:  # one request each: one batch per record
        await (await producer.send(tp.topic, b"x", partition=tp.partition, timestamp_ms=ts))


async def _answer(consumer: AIOKafkaConsumer, tp: TopicPartition, query: int) -> int | None:
    found = (await consumer.offsets_for_times({tp: query}))[tp]
    return None if found is None else int(found.offset)


async def probe(bootstrap: str) -> bool:
    """Print each case; True when the broker answered every one as Kafka does."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await producer.start()
    await consumer.start()
    try:
        # Explicit CreateTimes 2020-01-01T00:00:00Z + 0..5 s, all written now.
        explicit = await _topic(bootstrap)
        await _produce(producer, explicit, [_PAST + i * 1000 for i in range(6)])
        # Producer-stamped (now) records written 2 s apart, the query time between them.
        live = await _topic(bootstrap)
        await _produce(producer, live, [None] * 3)
        await asyncio.sleep(1.0)
        between = int(time.time() * 1000)
        await asyncio.sleep(1.0)
        await _produce(producer, live, [None] * 3)
        now = int(time.time() * 1000)
        cases = [
            ("CreateTime: query = 4th record's time", explicit, _PAST + 3000, 3),
            ("CreateTime: query after every record, before now", explicit, _PAST + _HOUR_MS,
             None),
            ("CreateTime: query 1 h in the future", explicit, now + _HOUR_MS, None),
            ("now-stamped: query between two writes 2 s apart", live, between, 3),
            ("now-stamped: query 1 h in the future", live, now + _HOUR_MS, None),
        ]
        ok = True
        print(f"{'case':52} {'Kafka':>6} {'broker':>6}")
        for name, tp, query, kafka in cases:
            got = await _answer(consumer, tp, query)
            ok &= got == kafka
            print(f"{name:52} {kafka!s:>6} {got!s:>6}{'' if got == kafka else '  WRONG'}")
        return ok
    finally:
        await consumer.stop()
        await producer.stop()


@contextlib.contextmanager
def _tansu() -> Iterator[str]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.broker import run_broker

    with run_broker(Path(tempfile.mkdtemp(prefix="probe-"))) as broker:
        yield broker.bootstrap


def main() -> int:
    """Probe the given broker, or a Tansu broker started for the purpose."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="host:port of the broker (default: start Tansu)")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        bootstrap = args.bootstrap or stack.enter_context(_tansu())
        return 0 if asyncio.run(probe(bootstrap)) else 1


if __name__ == "__main__":
    sys.exit(main())
