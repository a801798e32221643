"""Observers see every result once the broker has acknowledged it.

The drift monitor is one; tests use :class:`RecordingObserver`. ``observe`` runs on the
worker's hot path, so it must be synchronous and cheap (update counters, append to a
window); anything slow belongs in ``run``, which the worker starts as a task and which
publishes alerts through the callback it is given.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from evalstream.config import Settings
from evalstream.events import Alert, EvalResult
from evalstream.metrics import Metrics

__all__ = ["PublishAlert", "RecordingObserver", "ResultObserver", "drift_observer"]

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
    """Keeps every observed result in memory (tests, the demo)."""

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

    Imported by name so the worker runs (without drift alerts) in a build without it.
    """
    if not settings.drift.enabled:
        return None
    try:
        module = importlib.import_module("evalstream.app.monitor")
    except ModuleNotFoundError as exc:
        if exc.name != "evalstream.app.monitor":
            raise
        return None
    observer: ResultObserver | None = module.build_monitor(settings, metrics)
    return observer
