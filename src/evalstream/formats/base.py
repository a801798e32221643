"""The decoder contract: one Kafka message in, zero or more trace events out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from evalstream.events import Record, TraceEvent

__all__ = ["MAX_RECORD_TIMESTAMP_MS", "Decoded", "Decoder", "record_time_ms"]


@dataclass(slots=True)
class Decoded:
    """What one message decoded into.

    ``skipped`` counts parts of the message that were valid but not evaluable, by reason
    (``no_content``, ``not_llm``...): they are counted, never dead-lettered.
    """

    events: list[TraceEvent] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)


class Decoder(Protocol):
    """Decodes one message. Raises ``DecodeError`` (-> dead letter) when it cannot."""

    def __call__(self, record: Record) -> Decoded:
        """Decode ``record``."""
        ...


#: The Kafka record timestamps (ms) an event without a time of its own takes as its time:
#: from the epoch to year 2603. A producer may set any int64 as CreateTime (Kafka's "none"
#: is -1); outside this range it is no time at all, and must not cost the event, as it did
#: (a flat_json event failed validation as ``invalid_field``, OTLP spans were dropped as
#: ``bad_span``). 2e13 ms is also where pydantic would start reading seconds as ms.
MAX_RECORD_TIMESTAMP_MS = 20_000_000_000_000


def record_time_ms(timestamp: int | None) -> int | None:
    """``timestamp`` (a record's, in ms) when usable as an event time, else None."""
    if timestamp is None or not 0 <= timestamp <= MAX_RECORD_TIMESTAMP_MS:
        return None
    return timestamp
