"""The drift monitor: gauges from the engine, alerts through the publish callback."""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from evalstream.app.monitor import DriftMonitor, build_monitor
from evalstream.app.observers import ResultObserver
from evalstream.config import Settings
from evalstream.config.drift import DriftSettings
from evalstream.drift import design_cusum
from evalstream.drift.cusum import is_designed
from evalstream.events import Alert, EvalResult
from evalstream.metrics import Metrics


class FakeClock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def result(passed: bool, *, rate: float = 1.0) -> EvalResult:
    return EvalResult.model_validate({
        "result_id": "x", "event_id": "e", "trace_id": "t", "route": "chat",
        "evaluator": "refusal", "passed": passed, "sample_rate": rate,
    })


SETTINGS = DriftSettings(warmup_samples=100, min_detect_samples=20, arl0=1e5,
                         windows_s=[60, 300], bucket_s=1, min_samples=30)


def gauge(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_build_monitor_respects_enabled() -> None:
    metrics = Metrics()
    assert build_monitor(Settings(drift=DriftSettings(enabled=False)), metrics) is None
    monitor = build_monitor(Settings(), metrics)
    assert isinstance(monitor, ResultObserver)


def test_gauges_are_nan_until_enough_data_then_weighted() -> None:
    metrics, clock = Metrics(), FakeClock()
    monitor = DriftMonitor(SETTINGS, metrics, clock)
    for _ in range(10):
        monitor.observe(result(True))
    monitor.tick()
    labels = {"route": "chat", "evaluator": "refusal", "window": "1m"}
    assert gauge(metrics, "evalstream_pass_rate_samples", **labels) == 10
    for name in ("evalstream_pass_rate", "evalstream_pass_rate_lower",
                 "evalstream_pass_rate_upper"):
        value = gauge(metrics, name, **labels)
        assert value is not None
        assert math.isnan(value), name  # not enough data is NaN, never 0
    for _ in range(30):  # failures sampled at 50%: each counts twice
        monitor.observe(result(False, rate=0.5))
    monitor.tick()
    assert gauge(metrics, "evalstream_pass_rate_samples", **labels) == 40
    assert gauge(metrics, "evalstream_pass_rate", **labels) == pytest.approx(10 / 70)
    lower = gauge(metrics, "evalstream_pass_rate_lower", **labels)
    upper = gauge(metrics, "evalstream_pass_rate_upper", **labels)
    assert lower is not None
    assert upper is not None
    assert lower < 10 / 70 < upper
    # Still warming up: statistic and baseline unknown, not firing.
    det = {"route": "chat", "evaluator": "refusal"}
    assert gauge(metrics, "evalstream_drift_alert_firing", kind="pass_rate_drop", **det) == 0
    stat = gauge(metrics, "evalstream_drift_statistic", detector="pass_rate_drop", **det)
    assert stat is not None
    assert math.isnan(stat)
    # The window empties as time passes: back to "not enough data".
    clock.t += 600
    monitor.tick()
    assert gauge(metrics, "evalstream_pass_rate_samples", **labels) == 0
    value = gauge(metrics, "evalstream_pass_rate", **labels)
    assert value is not None
    assert math.isnan(value)


async def test_run_publishes_firing_then_resolved_and_exports_state() -> None:
    metrics, clock = Metrics(), FakeClock()
    settings = SETTINGS.model_copy(update={"tick_s": 0.01})
    monitor = DriftMonitor(settings, metrics, clock)
    published: list[Alert] = []
    got = asyncio.Event()

    async def publish(alert: Alert) -> None:
        published.append(alert)
        got.set()

    stop = asyncio.Event()
    task = asyncio.create_task(monitor.run(publish, stop))
    rng = random.Random(2)

    def feed(n: int, p: float) -> None:
        for _ in range(n):
            monitor.observe(result(rng.random() < p))
            clock.t += 0.5

    feed(400, 0.95)
    feed(200, 0.30)
    await asyncio.wait_for(got.wait(), timeout=5)
    assert [a.state for a in published] == ["firing"]
    det = {"route": "chat", "evaluator": "refusal"}
    assert gauge(metrics, "evalstream_drift_alert_firing", kind="pass_rate_drop", **det) == 1
    baseline = gauge(metrics, "evalstream_drift_baseline_pass_rate", **det)
    assert baseline == pytest.approx(0.95, abs=0.05)
    stat = gauge(metrics, "evalstream_drift_statistic", detector="pass_rate_drop", **det)
    assert stat is not None
    assert stat >= (published[0].threshold or math.inf)
    got.clear()
    feed(1500, 0.97)
    await asyncio.wait_for(got.wait(), timeout=5)
    assert [a.state for a in published] == ["firing", "resolved"]
    await asyncio.sleep(0.05)
    assert gauge(metrics, "evalstream_drift_alert_firing", kind="pass_rate_drop", **det) == 0
    stop.set()
    await asyncio.wait_for(task, timeout=2)


async def test_failed_publish_keeps_the_alert_queued() -> None:
    monitor = DriftMonitor(SETTINGS.model_copy(update={"baselines": {"refusal": 0.95}}),
                           Metrics(), FakeClock())
    for _ in range(50):
        monitor.observe(result(False))
    for needed in monitor.engine.designs_needed():  # run() solves these in a thread
        design_cusum(*needed)
    assert [a.state for a in monitor.tick()] == ["firing"]

    async def broken(alert: Alert) -> None:
        raise RuntimeError("broker down")

    with pytest.raises(RuntimeError, match="broker down"):
        await monitor.flush(broken)
    sent: list[Alert] = []

    async def ok(alert: Alert) -> None:
        sent.append(alert)

    await monitor.flush(ok)
    assert [a.state for a in sent] == ["firing"]
    assert monitor.tick() == []


def test_tick_never_solves_a_design_on_the_event_loop() -> None:
    # An ARL0 no other test uses, so the design is not cached: it became needed while the
    # solver thread was busy. tick() leaves it to the thread's next round.
    settings = SETTINGS.model_copy(update={"arl0": 76_543.0})
    monitor = DriftMonitor(settings, Metrics(), FakeClock())
    for i in range(150):  # warm-up at 100%, then failures
        monitor.observe(result(i < 100))
    [needed] = monitor.engine.designs_needed()
    monitor.tick()
    assert not is_designed(*needed)
    assert monitor.engine.designs_needed() == {needed}
    design_cusum(*needed)  # what the thread does
    monitor.tick()
    assert monitor.engine.designs_needed() == set()
    det = next(iter(monitor.engine.detectors()))
    assert det.statistic is not None  # armed, and the 50 outcomes seen meanwhile replayed
    assert det.statistic > 0


async def test_stop_resolves_firing_alerts_as_handed_over() -> None:
    settings = SETTINGS.model_copy(update={"baselines": {"refusal": 0.95}, "tick_s": 0.01})
    monitor = DriftMonitor(settings, Metrics(), FakeClock())
    published: list[Alert] = []
    got = asyncio.Event()

    async def publish(alert: Alert) -> None:
        published.append(alert)
        got.set()

    for _ in range(50):
        monitor.observe(result(False))
    stop = asyncio.Event()
    task = asyncio.create_task(monitor.run(publish, stop))
    await asyncio.wait_for(got.wait(), timeout=5)
    stop.set()
    await asyncio.wait_for(task, timeout=2)
    firing, resolved = published
    assert (firing.state, resolved.state) == ("firing", "resolved")
    assert resolved.alert_id == firing.alert_id  # the same alert, closed
    assert (resolved.route, resolved.evaluator, resolved.kind) == (
        "chat", "refusal", "pass_rate_drop")
    assert "handed over at shutdown" in resolved.summary
    assert monitor.tick() == []  # nothing left to publish
