"""An in-memory sink for unit tests, with optional failure injection."""

from __future__ import annotations

from dataclasses import dataclass

from evalstream.errors import SinkError
from evalstream.events import Alert, EvalResult, Record, dump_json

__all__ = ["DeadLetter", "MemorySink"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead letter as published."""

    record: Record
    reason: str
    error: str


class MemorySink:
    """Collects outputs in lists.

    Args:
        fail: When True, every publish raises ``SinkError`` (a broker that is down for good).
    """

    def __init__(self, *, fail: bool = False) -> None:
        self.results: list[EvalResult] = []
        self.dead_letters: list[DeadLetter] = []
        self.alerts: list[tuple[str, Alert]] = []
        self.fail = fail

    async def _ack(self) -> None:
        if self.fail:
            raise SinkError("memory sink set to fail")

    async def start(self) -> None:
        """Nothing to connect."""

    async def publish_result(self, result: EvalResult) -> None:
        """Keep ``result``, once its JSON is built as the Kafka sink builds it (so a result
        that could not be published fails here too)."""
        dump_json(result)
        await self._ack()
        self.results.append(result)

    async def publish_dead_letter(self, record: Record, reason: str, error: str) -> None:
        """Keep the dead letter."""
        await self._ack()
        self.dead_letters.append(DeadLetter(record, reason, error))

    async def publish_alert(self, alert: Alert, key: str) -> None:
        """Keep the alert."""
        await self._ack()
        self.alerts.append((key, alert))

    async def flush(self) -> None:
        """Nothing is buffered."""

    async def stop(self) -> None:
        """Nothing to close."""
