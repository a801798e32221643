"""An in-memory sink for unit tests, with optional latency and failure injection."""

from __future__ import annotations

import asyncio
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
        delay_s: Simulated acknowledgement latency per publish.
        fail: When True, every publish raises ``SinkError`` (a broker that is down for good).
    """

    def __init__(self, delay_s: float = 0.0, *, fail: bool = False) -> None:
        self.results: list[EvalResult] = []
        self.dead_letters: list[DeadLetter] = []
        self.alerts: list[tuple[str, Alert]] = []
        self.delay_s = delay_s
        self.fail = fail

    async def _ack(self) -> None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
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
