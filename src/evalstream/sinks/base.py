"""The sink contract: every publish returns only once the output is durable."""

from __future__ import annotations

from typing import Protocol

from evalstream.events import Alert, EvalResult, Record

__all__ = ["Sink"]


class Sink(Protocol):
    """Where results, dead letters and alerts go (Kafka in production, memory in tests).

    Each ``publish_*`` returns after the broker acknowledged the write and raises
    ``SinkError`` when it could not be made durable, so the caller commits offsets only
    for work that is safely published.
    """

    async def start(self) -> None:
        """Connect."""
        ...

    async def publish_result(self, result: EvalResult) -> bool:
        """Publish one result (key = trace_id); False when its OTel copy
        (``topics.otel_results``) was refused for good and given up, the result published."""
        ...

    async def publish_dead_letter(self, record: Record, reason: str, error: str) -> None:
        """Publish the original message byte-for-byte with headers naming the problem."""
        ...

    async def publish_alert(self, alert: Alert, key: str) -> None:
        """Publish one alert event under ``key`` (route/evaluator: one alert stream's
        firing and resolved events stay in order on one partition)."""
        ...

    async def flush(self) -> None:
        """Wait until everything sent is acknowledged."""
        ...

    async def stop(self) -> None:
        """Flush and close."""
        ...
