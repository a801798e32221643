"""Where a consumer group's fresh partitions start when ``kafka.start_from`` is set.

A backfill is a new group that starts at a time: each assigned partition with no committed
offset starts at the first record stamped at or after ``start_from`` (ListOffsets by
timestamp), or at its end when there is none. A partition with a committed offset keeps
it, so a restarted backfill resumes instead of rewinding.

Brokers differ on "none": Kafka answers offset -1 (aiokafka: None); Tansu 0.6 answers
offset 0 with timestamp -1, and compares the broker's write time, not the record's
CreateTime. An answer stamped before the time asked is therefore taken as "none" too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from evalstream.errors import SourceError

__all__ = ["Start", "epoch_ms", "start_positions"]

#: How a start offset was chosen: the first record at/after the time, or the end because
#: the broker has none (``no_record``) or answered one stamped earlier (``earlier_record``).
How = Literal["timestamp", "end_no_record", "end_earlier_record"]

_BACKOFF_S = 0.5


@dataclass(frozen=True)
class Start:
    """Where one fresh partition starts, and why."""

    offset: int
    how: How


def epoch_ms(when: datetime) -> int:
    """``when`` (timezone-aware) in milliseconds since the epoch, as Kafka stamps records."""
    return int(when.timestamp() * 1000)


async def start_positions(consumer: Any, tps: Sequence[TopicPartition], start_from: datetime,
                          timeout_s: float) -> dict[TopicPartition, Start]:
    """The start offsets of those of ``tps`` that have no committed offset in the group.

    Transient broker errors are retried until ``timeout_s``.

    Args:
        consumer: A started ``AIOKafkaConsumer`` with a group.
        tps: The partitions just assigned.
        start_from: The time to start at.
        timeout_s: How long the answers may take in all.

    Raises:
        SourceError: no complete answer within ``timeout_s``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    backoff = _BACKOFF_S
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                return await _lookup(consumer, tps, epoch_ms(start_from))
        except TimeoutError:
            raise SourceError(f"kafka.start_from: the broker did not say where to start "
                              f"within {timeout_s:g} s") from None
        except KafkaError as exc:
            if loop.time() + backoff >= deadline:
                raise SourceError(f"kafka.start_from: cannot look up the offsets at "
                                  f"{start_from.isoformat()}: {type(exc).__name__}: {exc}") \
                    from exc
            await asyncio.sleep(backoff)
            backoff *= 2


async def _lookup(consumer: Any, tps: Sequence[TopicPartition],
                  at_ms: int) -> dict[TopicPartition, Start]:
    committed = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
    fresh = [tp for tp, offset in zip(tps, committed, strict=True) if offset is None]
    if not fresh:
        return {}
    found = await consumer.offsets_for_times(dict.fromkeys(fresh, at_ms))
    out: dict[TopicPartition, Start] = {}
    to_end: dict[TopicPartition, How] = {}
    for tp in fresh:
        hit = found.get(tp)
        if hit is None:
            to_end[tp] = "end_no_record"
        elif hit.timestamp < at_ms:  # Tansu's "none" (timestamp -1): never start before
            to_end[tp] = "end_earlier_record"
        else:
            out[tp] = Start(int(hit.offset), "timestamp")
    if to_end:
        ends = await consumer.end_offsets(list(to_end))
        for tp, how in to_end.items():
            out[tp] = Start(int(ends[tp]), how)
    return out
