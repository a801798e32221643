"""The drift monitor: feeds results to ``evalstream.drift`` and exports what it concludes.

``observe`` (hot path, sync) counts each acknowledged result into the pass-rate windows and
the detectors. ``run`` ticks every ``drift.tick_s``: it refreshes the gauges
(``evalstream_pass_rate*``, ``evalstream_drift_*``) and publishes an ``Alert`` for every
detector that started or stopped firing. The clock is injectable so tests are exact.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from evalstream.app.observers import PublishAlert, ResultObserver
from evalstream.app.waits import wait_set
from evalstream.config import Settings
from evalstream.config.drift import DriftSettings
from evalstream.drift import KIND_PASS_RATE, DriftEngine, design_cusum
from evalstream.events import Alert, EvalResult
from evalstream.logging import get_logger
from evalstream.metrics import Metrics

__all__ = ["DriftMonitor", "build_monitor"]

log = get_logger(__name__)

Clock = Callable[[], float]

_NAN = math.nan


class DriftMonitor:
    """Live pass rates, drift detectors and their alerts for one worker.

    Args:
        settings: The ``drift`` section of the configuration.
        metrics: Where the gauges live.
        clock: Seconds since the epoch; ``time.time`` unless a test injects one.
    """

    def __init__(self, settings: DriftSettings, metrics: Metrics,
                 clock: Clock = time.time) -> None:
        self.settings = settings
        self.metrics = metrics
        # Designs are solved off the event loop (run) rather than in observe (hot path).
        self.engine = DriftEngine(settings, defer_designs=True)
        self._clock = clock
        # Alerts decided but not yet acknowledged by the broker, oldest first.
        self._outbox: list[Alert] = []

    def observe(self, result: EvalResult) -> None:
        """Count one acknowledged result (errors and verdict-less results are ignored).

        Canary results are ignored too: they are evaluated whatever the sampling and their
        content is chosen, so in a pass-rate window they would bias it and could fire or
        mask an alert (they are counted in ``evalstream_canary_*`` instead).
        """
        if result.canary:
            return
        self.engine.observe(result, self._clock())

    def tick(self) -> list[Alert]:
        """Refresh every gauge and return the alerts waiting to be published.

        Detectors whose CUSUM design is not solved yet stay unarmed: ``run`` solves them in
        a thread before the next tick, never here on the event loop.
        """
        now = self._clock()
        m = self.metrics
        self.engine.arm_pending()
        for route, evaluator, window, stats in self.engine.pass_rates(now):
            labels = (route, evaluator, window)
            m.pass_rate_samples.labels(*labels).set(stats.n)
            # NaN, not 0: an empty or tiny window is "not enough data", never a 0% pass rate.
            m.pass_rate.labels(*labels).set(_or_nan(stats.rate))
            m.pass_rate_lower.labels(*labels).set(_or_nan(stats.lower))
            m.pass_rate_upper.labels(*labels).set(_or_nan(stats.upper))
        self._outbox.extend(self.engine.drain_alerts(now))
        for det in self.engine.detectors():
            m.drift_statistic.labels(det.route, det.evaluator, det.kind).set(
                _or_nan(det.statistic))
            m.drift_firing.labels(det.route, det.evaluator, det.kind).set(int(det.firing))
            if det.kind == KIND_PASS_RATE:
                base = None if det.baseline_bad is None else 1.0 - det.baseline_bad
                m.drift_baseline.labels(det.route, det.evaluator).set(_or_nan(base))
        return list(self._outbox)

    async def flush(self, publish_alert: PublishAlert) -> None:
        """Publish waiting alerts in order; one that fails stays queued (and re-raises)."""
        while self._outbox:
            alert = self._outbox[0]
            await publish_alert(alert)
            self._outbox.pop(0)
            log.info("drift_alert", state=alert.state, route=alert.route,
                     evaluator=alert.evaluator, kind=alert.kind, severity=alert.severity,
                     n=alert.n)

    async def run(self, publish_alert: PublishAlert, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set, publishing alert state changes as they happen.

        On stop, every firing alert is published once more as ``resolved`` (handed over at
        shutdown): the next process starts with fresh detectors and cannot resolve it.
        """
        while not stop.is_set():
            needed = self.engine.designs_needed()
            if needed:
                # A CUSUM design can take up to about a second to solve for extreme
                # settings; a thread keeps the worker's loop responsive meanwhile.
                await asyncio.to_thread(_solve, needed)
            self.tick()
            # A publish error (SinkError) propagates: the worker treats the output as lost
            # and stops; the alert is still queued should the caller retry.
            await self.flush(publish_alert)
            await wait_set(stop, self.settings.tick_s)
        # Stopping: count the last results, then resolve what is still firing. Detector
        # state dies with this process and alert ids hash the first-seen time, so an alert
        # left firing here could never be resolved by the next one.
        self.tick()
        self._outbox.extend(self.engine.hand_over(self._clock()))
        await self.flush(publish_alert)


def _solve(needed: set[tuple[float, float, float]]) -> None:
    for p0, shift, arl0 in needed:
        design_cusum(p0, shift, arl0)


def _or_nan(value: float | None) -> float:
    return _NAN if value is None else value


def build_monitor(settings: Settings, metrics: Metrics) -> ResultObserver | None:
    """The worker's drift monitor, or ``None`` when ``drift.enabled`` is false.

    Args:
        settings: The whole configuration (only ``settings.drift`` is read).
        metrics: The worker's metric container.
    """
    if not settings.drift.enabled:
        return None
    return DriftMonitor(settings.drift, metrics)
