"""Per-(route, evaluator) windows and detectors, and the alerts they raise (pure).

The engine is fed results and a time (the caller's clock, so tests are deterministic) and
answers two questions: what are the live pass rates now, and which alerts changed state.
The sequential test itself is ``detector``'s. It does no I/O: ``evalstream.app.monitor``
turns its answers into gauges and published ``Alert`` events.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from evalstream.config.drift import DriftSettings, Severity
from evalstream.drift.detector import Detector, State, Transition
from evalstream.drift.mix import LabelVocabulary, LabelWindow, MixDetector, MixResult, chi2_isf
from evalstream.drift.stats import SlidingCounts, WindowStats, wilson_interval
from evalstream.events import Alert, EvalResult, stable_hash

__all__ = [
    "KIND_LABEL_MIX",
    "KIND_LABEL_SHARE",
    "KIND_PASS_RATE",
    "DriftEngine",
    "format_window",
]

KIND_PASS_RATE = "pass_rate_drop"  # noqa: S105 - an alert kind, not a password
KIND_LABEL_SHARE = "label_share"
KIND_LABEL_MIX = "label_mix"

_HANDOVER = ("handed over at shutdown, still firing when this worker stopped (detector "
             "state is not kept: a restarted worker relearns its baseline, from this drift "
             "if it persists, and then stays quiet; a pass rate set in drift.baselines "
             "does not)")


def format_window(seconds: int) -> str:
    """A window length as a Prometheus-style label value: ``300`` -> ``"5m"``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(slots=True)
class _Key:
    route: str
    evaluator: str
    passes: SlidingCounts
    pass_detector: Detector
    label: str | None = None
    label_counts: SlidingCounts | None = None
    label_detector: Detector | None = None
    mix_window: LabelWindow | None = None
    mix_detector: MixDetector | None = None


def _ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


class DriftEngine:
    """Live windows and detectors for every (route, evaluator) that produced results.

    Args:
        settings: Windows, baselines and detector tuning.
        defer_designs: Never solve an uncached CUSUM design (on the caller's event loop):
            detectors wait until the monitor has solved ``designs_needed`` in a thread,
            and ``arm_pending`` arms them.
    """

    def __init__(self, settings: DriftSettings, *, defer_designs: bool = False) -> None:
        self.settings = settings
        self._defer = defer_designs
        self._windows = sorted(set(settings.windows_s))
        self._keys: dict[tuple[str, str], _Key] = {}

    def _key(self, route: str, evaluator: str) -> _Key:
        key = self._keys.get((route, evaluator))
        if key is None:
            s = self.settings
            horizon = self._windows[-1]
            configured = s.baselines.get(f"{route}/{evaluator}", s.baselines.get(evaluator))
            key = _Key(
                route=route,
                evaluator=evaluator,
                passes=SlidingCounts(s.bucket_s, horizon),
                pass_detector=Detector(
                    KIND_PASS_RATE, route, evaluator, s, s.min_shift,
                    baseline_bad=None if configured is None else 1.0 - configured,
                    defer=self._defer),
            )
            label = s.watch_labels.get(evaluator)
            if label is not None:
                key.label = label
                key.label_counts = SlidingCounts(s.bucket_s, horizon)
                key.label_detector = Detector(KIND_LABEL_SHARE, route, evaluator, s,
                                              s.label_min_shift, label=label,
                                              defer=self._defer)
                # One vocabulary: the window and the baseline must collapse rare labels
                # into the same overflow bucket, or the G-test compares unlike things.
                vocabulary = LabelVocabulary()
                key.mix_window = LabelWindow(s.bucket_s, horizon, vocabulary)
                key.mix_detector = MixDetector(
                    route, evaluator, warmup=s.warmup_samples, alpha=s.mix_alpha,
                    resolve_p=s.mix_resolve_p, min_samples=s.min_samples,
                    window_s=self._windows[0], vocabulary=vocabulary)
            self._keys[(route, evaluator)] = key
        return key

    def observe(self, result: EvalResult, now: float) -> None:
        """Count one published result at time ``now``.

        Errors and results without a verdict do not count: an outage of the judge must
        not read as a drop in quality.
        """
        if result.status != "ok":
            return
        weight = 1.0 / result.sample_rate
        if result.passed is not None:
            key = self._key(result.route, result.evaluator)
            key.passes.add(now, result.passed, weight)
            key.pass_detector.observe(not result.passed, now)
        if result.label is not None and result.evaluator in self.settings.watch_labels:
            key = self._key(result.route, result.evaluator)
            hit = result.label == key.label
            if key.label_counts is not None and key.label_detector is not None:
                key.label_counts.add(now, hit, weight)
                key.label_detector.observe(hit, now)
            if key.mix_window is not None and key.mix_detector is not None:
                key.mix_window.add(now, result.label)
                key.mix_detector.observe(result.label, now)

    def designs_needed(self) -> set[tuple[float, float, float]]:
        """``design_cusum`` arguments that detectors wait for (see ``defer_designs``)."""
        needed = set()
        for key in self._keys.values():
            for det in (key.pass_detector, key.label_detector):
                if det is not None and det.awaiting_design is not None:
                    needed.add(det.awaiting_design)
        return needed

    def arm_pending(self) -> None:
        """Arm every detector whose awaited design is cached (never solves one)."""
        for key in self._keys.values():
            for det in (key.pass_detector, key.label_detector):
                if det is not None:
                    det.arm_pending()

    def pass_rates(self, now: float) -> Iterator[tuple[str, str, str, WindowStats]]:
        """``(route, evaluator, window label, stats)`` for every key with pass/fail data."""
        for key in self._keys.values():
            if key.passes.last_t is None:
                continue
            for w in self._windows:
                stats = key.passes.stats(now, w, self.settings.min_samples)
                yield key.route, key.evaluator, format_window(w), stats

    def detectors(self) -> Iterator[Detector | MixDetector]:
        """Every detector (pass rate, label share, label mix) that has seen data."""
        for key in self._keys.values():
            if key.passes.last_t is not None:
                yield key.pass_detector
            if key.label_detector is not None and key.label_detector.last_seen is not None:
                yield key.label_detector
            if key.mix_detector is not None and key.mix_detector.last_seen is not None:
                yield key.mix_detector

    def _current(self, key: _Key, kind: str, now: float) -> tuple[str, WindowStats]:
        counts = key.passes if kind == KIND_PASS_RATE else key.label_counts
        stats = WindowStats(0, 0.0, 0.0, None, None, None)
        if counts is None:
            return format_window(self._windows[-1]), stats
        for w in self._windows:
            stats = counts.stats(now, w, self.settings.min_samples)
            if stats.enough:
                return format_window(w), stats
        return format_window(self._windows[-1]), stats

    def drain_alerts(self, now: float) -> list[Alert]:
        """Alerts for every state change since the last call (oldest first)."""
        alerts: list[Alert] = []
        for key in self._keys.values():
            for det in (key.pass_detector, key.label_detector):
                if det is None:
                    continue
                det.check_stale(now)
                while det.pending:
                    alerts.append(self._alert(key, det, det.pending.pop(0), now))
            mix = key.mix_detector
            if mix is not None and key.mix_window is not None:
                mix.check(key.mix_window, now)
                mix.check_stale(now, self.settings.stale_after_s)
                while mix.pending:
                    state, at, res = mix.pending.pop(0)
                    alerts.append(self._mix_alert(key, mix, state, at, res))
        alerts.sort(key=lambda a: a.at)
        return alerts

    def hand_over(self, now: float) -> list[Alert]:
        """Resolve every firing alert because this process is stopping.

        Detector state lives in memory and an alert's id hashes its first-seen time, so no
        later process could ever resolve an alert left firing. The summary says what the
        next process does: it learns its baseline afresh, so a drift that persists through
        its warm-up becomes its baseline and does not fire again (a pass rate configured in
        ``drift.baselines`` is not relearned and does; label shares are always learned).
        """
        alerts: list[Alert] = []
        for key in self._keys.values():
            for det in (key.pass_detector, key.label_detector):
                if det is not None and det.firing:
                    det.firing = False
                    stat = det.statistic if det.statistic is not None else 0.0
                    tr = Transition("resolved", now, stat, handover=True)
                    alerts.append(self._alert(key, det, tr, now))
            mix = key.mix_detector
            if mix is not None and mix.firing:
                mix.firing = False
                alerts.append(self._mix_alert(key, mix, "resolved", now, mix.last,
                                              handover=True))
        return alerts

    def _severity(self, det: Detector, stats: WindowStats) -> Severity:
        s = self.settings
        base: Severity = s.severities.get(det.kind, "warning")
        if det.baseline_bad is None or stats.lower is None or stats.upper is None:
            return base
        if det.kind == KIND_PASS_RATE:
            far = stats.upper < (1.0 - det.baseline_bad) - s.critical_shift
        else:
            far = stats.lower > det.baseline_bad + s.critical_shift
        return "critical" if far else base

    def _alert(self, key: _Key, det: Detector, tr: Transition, now: float) -> Alert:
        window, stats = self._current(key, det.kind, now)
        bad0 = det.baseline_bad
        if det.kind == KIND_PASS_RATE:
            baseline = None if bad0 is None else 1.0 - bad0
            what = f"pass rate of {key.evaluator} on route {key.route}"
        else:
            baseline = bad0
            what = f"share of label {det.label!r} from {key.evaluator} on route {key.route}"
        first = det.first_seen if det.first_seen is not None else tr.at
        design = det.design
        # The CUSUM decides, from evidence accumulated since the change began; the window's
        # rate and interval are context only, so the summary says which is which (a window
        # interval that still holds the baseline read as "no evidence" next to "dropped").
        of_baseline = f" {baseline:.1%}" if baseline is not None else ""
        if tr.state == "firing":
            change = "dropped below" if det.kind == KIND_PASS_RATE else "rose above"
            summary = f"{what} {change} its baseline{of_baseline} (CUSUM past its threshold)"
        elif tr.handover:
            summary = f"{what}: {_HANDOVER}"
        elif tr.stale:
            summary = f"{what}: no data, stale"
        else:
            side = "below" if det.kind == KIND_PASS_RATE else "above"
            summary = f"{what} no longer {side} its baseline{of_baseline} (CUSUM evidence gone)"
        if stats.enough:
            # Resolved, the window can still hold the episode's tail ("83.6%" next to a
            # 98.1% baseline): say so, or the two figures read as a contradiction.
            tail = ""
            if tr.state == "resolved" and baseline is not None and stats.rate is not None and (
                    stats.rate < baseline if det.kind == KIND_PASS_RATE
                    else stats.rate > baseline):
                tail = ", which still holds part of the change"
            summary += (f"; last {window}{tail}: {stats.rate:.1%} (95% CI {stats.lower:.1%}-"
                        f"{stats.upper:.1%}, n={stats.n})")
        severity = self._severity(det, stats) if tr.state == "firing" else \
            self.settings.severities.get(det.kind, "warning")
        interval = (stats.lower, stats.upper) if stats.lower is not None \
            and stats.upper is not None else None
        return Alert(
            alert_id=stable_hash(key.route, key.evaluator, det.kind, first, length=24),
            state=tr.state,
            route=key.route,
            evaluator=key.evaluator,
            kind=det.kind,
            severity=severity,
            baseline=baseline,
            current=stats.rate,
            interval=interval,
            n=stats.n,
            statistic=None if math.isnan(tr.statistic) else tr.statistic,
            threshold=design.threshold if design is not None else None,
            first_seen=_ts(first),
            at=_ts(tr.at),
            summary=summary,
        )

    def _mix_alert(self, key: _Key, det: MixDetector, state: State, at: float,
                   res: MixResult | None, *, handover: bool = False) -> Alert:
        first = det.first_seen if det.first_seen is not None else at
        what = f"label mix of {key.evaluator} on route {key.route}"
        if handover:
            summary = f"{what}: {_HANDOVER}"
        elif res is None:
            summary = (f"{what}: stale, no window of {self.settings.min_samples}+ labels to "
                       f"test for {self.settings.stale_after_s:g} s")
        else:
            verb = "shifted" if state == "firing" else "back to baseline"
            summary = (f"{what} {verb} (G={res.g:.1f}, df={res.df}, p={res.p_value:.2g}); "
                       f"most changed label {res.label!r}: {res.baseline_share:.1%} -> "
                       f"{res.share:.1%} (n={res.n})")
        severity: Severity = self.settings.severities.get(KIND_LABEL_MIX, "info")
        return Alert(
            alert_id=stable_hash(key.route, key.evaluator, KIND_LABEL_MIX, first, length=24),
            state=state,
            route=key.route,
            evaluator=key.evaluator,
            kind=KIND_LABEL_MIX,
            severity=severity,
            baseline=res.baseline_share if res else None,
            current=res.share if res else None,
            interval=wilson_interval(res.share, res.n) if res else None,
            n=res.n if res else 0,
            statistic=res.g if res else None,
            threshold=chi2_isf(det.alpha, res.df) if res and res.df else None,
            first_seen=_ts(first),
            at=_ts(at),
            summary=summary,
        )
