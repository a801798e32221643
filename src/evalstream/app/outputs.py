"""The publish stage of the worker: results, dead letters and alerts through one sink.

Each call returns once the broker acknowledged the write (raising ``SinkError`` when it
could not), then counts it; results are also shown to the observers, only after the ack.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalstream.app.observers import ResultObserver
from evalstream.events import Alert, EvalResult, Record
from evalstream.logging import LogLimits, get_logger
from evalstream.metrics import Metrics
from evalstream.sinks.base import Sink

__all__ = ["Outputs"]

log = get_logger(__name__)


class Outputs:
    """Publishes and counts.

    Args:
        sink: Where everything goes.
        metrics: Published-result, dead-letter and alert counters.
        observers: Told about every acknowledged result.
    """

    def __init__(self, sink: Sink, metrics: Metrics, observers: Sequence[ResultObserver]) -> None:
        self.sink = sink
        self._metrics = metrics
        self._observers = observers
        self._ok = metrics.results_published.labels("ok").inc
        self._error = metrics.results_published.labels("error").inc
        self._copy_rejected = metrics.otel_results_rejected.inc
        #: An observer bug repeats on every result: a burst of lines, then one a second.
        self._failure_logs: LogLimits[int] = LogLimits()

    async def result(self, result: EvalResult) -> None:
        """Publish one result, then let the observers see it."""
        if not await self.sink.publish_result(result):  # its OTel copy was given up
            self._copy_rejected(1)
        (self._ok if result.status == "ok" else self._error)(1)
        for i, observer in enumerate(self._observers):
            try:
                observer.observe(result)
            except Exception:  # an observer bug must not cost the result its commit
                self._metrics.observer_failures.labels(type(observer).__name__).inc()
                if (fields := self._failure_logs.fields(i)) is not None:
                    log.exception("observer_failed", observer=type(observer).__name__,
                                  **fields)

    async def dead_letter(self, record: Record, reason: str, error: str) -> None:
        """Publish the original message with the reason."""
        await self.sink.publish_dead_letter(record, reason, error)
        self._metrics.dead_letters.labels(reason).inc()

    async def alert(self, alert: Alert) -> None:
        """Publish one alert, keyed ``route/evaluator``."""
        await self.sink.publish_alert(alert, f"{alert.route}/{alert.evaluator}")
        self._metrics.alerts.labels(alert.route, alert.evaluator, alert.kind, alert.state).inc()
