"""An in-memory sink for unit tests, with optional failure injection."""

from __future__ import annotations

import time
from dataclasses import dataclass

from evalstream.errors import SinkError
from evalstream.events import Alert, EvalResult, Record, dump_json
from evalstream.sinks.otel_results import OtelEncoding, otel_result

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
        otel_encoding: When set, each result is also kept in ``otel_results`` as the
            OpenTelemetry event the Kafka sink writes to ``topics.otel_results``.
    """

    def __init__(self, *, fail: bool = False, otel_encoding: OtelEncoding | None = None) -> None:
        self.results: list[EvalResult] = []
        #: The OTel copies (message values, ``service.name`` ``evalstream``), in order.
        self.otel_results: list[bytes] = []
        self._otel_encoding = otel_encoding
        self.dead_letters: list[DeadLetter] = []
        self.alerts: list[tuple[str, Alert]] = []
        self.fail = fail

    async def _ack(self) -> None:
        if self.fail:
            raise SinkError("memory sink set to fail")

    async def start(self) -> None:
        """Nothing to connect."""

    async def publish_result(self, result: EvalResult) -> bool:
        """Keep ``result``, once its JSON is built as the Kafka sink builds it (so a result
        that could not be published fails here too); True (no copy is given up)."""
        dump_json(result)
        event = None if self._otel_encoding is None else otel_result(
            result, service_name="evalstream", scope_version="test",
            encoding=self._otel_encoding, observed_ns=time.time_ns())
        await self._ack()
        self.results.append(result)
        if event is not None:
            self.otel_results.append(event)
        return True

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
