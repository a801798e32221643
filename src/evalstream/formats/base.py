"""The decoder contract: one Kafka message in, zero or more trace events out."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from evalstream.events import Record, TraceEvent

__all__ = ["Decoded", "Decoder"]


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
