"""Observers see every result once the broker has acknowledged it.

The drift monitor is one; tests use :class:`RecordingObserver`. ``observe`` runs on the
worker's hot path (the message path, once per published result), so it must be
synchronous and cheap (update counters, append to a window); anything slow belongs in
``run``, which the worker starts as a task and which publishes alerts through the callback
it is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from evalstream.app.waits import wait_set
from evalstream.config import Settings
from evalstream.errors import SinkError
from evalstream.events import Alert, EvalResult
from evalstream.logging import get_logger
from evalstream.metrics import Metrics

__all__ = ["PublishAlert", "RecordingObserver", "ResultObserver", "drift_observer",
           "run_observer"]

log = get_logger(__name__)

_BACKOFF_S = 1.0
_BACKOFF_MAX_S = 60.0

#: Publishes one alert and returns once the broker has acknowledged it.
PublishAlert = Callable[[Alert], Awaitable[None]]


@runtime_checkable
class ResultObserver(Protocol):
    """Something that watches published results (e.g. the drift monitor)."""

    def observe(self, result: EvalResult) -> None:
        """Take note of one acknowledged result (sync, cheap, must not raise)."""
        ...

    async def run(self, publish_alert: PublishAlert, stop: asyncio.Event) -> None:
        """Background work until ``stop`` is set; alerts go out through ``publish_alert``."""
        ...


class RecordingObserver:
    """Keeps every observed result in memory (tests; the demo reads results back from Kafka)."""

    def __init__(self) -> None:
        self.results: list[EvalResult] = []

    def observe(self, result: EvalResult) -> None:
        """Append ``result``."""
        self.results.append(result)

    async def run(self, publish_alert: PublishAlert, stop: asyncio.Event) -> None:
        """Nothing to do in the background; returns when ``stop`` is set."""
        await stop.wait()


def drift_observer(settings: Settings, metrics: Metrics) -> ResultObserver | None:
    """The drift monitor (``evalstream.app.monitor``) when ``drift.enabled``.

    Imported here, not at the top: the monitor module imports this one (and with drift
    off it is never loaded).
    """
    if not settings.drift.enabled:
        return None
    from evalstream.app.monitor import build_monitor

    return build_monitor(settings, metrics)


async def run_observer(observer: ResultObserver, publish_alert: PublishAlert,
                       stop: asyncio.Event, fail: Callable[[BaseException], None],
                       metrics: Metrics | None = None) -> None:
    """Run ``observer`` until ``stop``, restarting it when it fails.

    An observer bug must not stop evaluation, nor silently stop drift alerting for the
    rest of the process: it is logged and the observer restarted (its state lives in the
    object), backing off so a bug that repeats does not spin. A stop during the backoff
    still runs it once more, so that it takes its final step (the drift monitor resolves
    its firing alerts as handed over). An alert that cannot be made durable
    (``SinkError``) goes to ``fail`` and ends the run. Each failure counts in
    ``evalstream_observer_failures_total`` (with ``metrics``).
    """
    backoff = _BACKOFF_S
    while True:
        try:
            await observer.run(publish_alert, stop)
            return
        except asyncio.CancelledError:
            raise
        except SinkError as exc:
            fail(exc)
            return
        except Exception:
            if metrics is not None:
                metrics.observer_failures.labels(type(observer).__name__).inc()
            log.exception("observer_run_failed", observer=type(observer).__name__,
                          restart_in_s=backoff)
            if stop.is_set():
                return  # it failed in its final step: nothing is left to retry
        await wait_set(stop, backoff)
        backoff = min(backoff * 2, _BACKOFF_MAX_S)
