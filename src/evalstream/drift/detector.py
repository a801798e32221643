"""One sequential test on one stream of bad/good outcomes, and the transitions it makes (pure).

A ``Detector`` learns (or is given) the baseline bad-outcome probability, runs a Bernoulli
CUSUM tuned for it, and records ``Transition``s (firing, resolved, stale) with alert
hysteresis. Turning those transitions into ``Alert`` events is ``engine``'s job.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from evalstream.config.drift import DriftSettings
from evalstream.drift.cusum import BernoulliCusum, CusumDesign, cached_design, design_cusum
from evalstream.drift.stats import wilson_interval
from evalstream.logging import get_logger

__all__ = ["Detector", "State", "Transition", "learned_baseline"]

_log = get_logger(__name__)

# Outcomes kept while a detector waits (about a tick) for its design.
_MAX_BACKLOG = 100_000

State = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class Transition:
    """A detector changing state at time ``at`` (seconds)."""

    state: State
    at: float
    statistic: float
    stale: bool = False
    #: Resolved because this process stops, not because the stream recovered.
    handover: bool = False


@dataclass(slots=True)
class Detector:
    """One sequential test on one stream of bad/good outcomes, with alert hysteresis.

    "Bad" is a failed evaluation (kind ``pass_rate_drop``) or the watched label (kind
    ``label_share``). The baseline probability of a bad outcome is learned from the first
    ``warmup_samples`` observations unless configured.

    With ``defer`` set, a CUSUM design that is not cached yet is never computed here
    (``observe`` is the worker's hot path, ``arm_pending`` runs on its event loop): the
    detector waits until someone else (the monitor's thread) has solved it, keeping the
    outcomes seen meanwhile, which ``arm_pending`` replays in order once it is armed.
    """

    kind: str
    route: str
    evaluator: str
    settings: DriftSettings
    shift: float
    baseline_bad: float | None = None
    label: str | None = None
    cusum: BernoulliCusum | None = None
    disabled: bool = False
    warm_n: int = 0
    warm_bad: int = 0
    n_since: int = 0
    firing: bool = False
    first_seen: float | None = None
    last_seen: float | None = None
    pending: list[Transition] = field(default_factory=list)
    defer: bool = False
    #: The bad-outcome probability the CUSUM is designed at, while awaiting its design.
    design_bad: float | None = None
    backlog: deque[tuple[bool, float]] = field(
        default_factory=lambda: deque(maxlen=_MAX_BACKLOG))

    def __post_init__(self) -> None:
        if self.baseline_bad is not None:
            self._arm_or_wait(self.baseline_bad, self.baseline_bad)

    def _arm_or_wait(self, baseline_bad: float, design_bad: float) -> None:
        if not self.defer:
            self._arm(baseline_bad, design_cusum(design_bad, self.shift, self.settings.arl0))
            return
        found, design = cached_design(design_bad, self.shift, self.settings.arl0)
        if found:
            self._arm(baseline_bad, design)
        else:
            self.baseline_bad, self.design_bad = baseline_bad, design_bad

    @property
    def awaiting_design(self) -> tuple[float, float, float] | None:
        """``design_cusum`` arguments this detector waits for, if any."""
        if self.cusum is None and not self.disabled and self.design_bad is not None:
            return self.design_bad, self.shift, self.settings.arl0
        return None

    def arm_pending(self) -> None:
        """Arm a detector whose awaited design is now cached; replay what it saw meanwhile.

        A design still not cached is left for the next call: solving it here could block
        the event loop for most of a second.
        """
        needed = self.awaiting_design
        if needed is None or self.baseline_bad is None:
            return
        found, design = cached_design(*needed)
        if not found:
            return
        self._arm(self.baseline_bad, design)
        self.design_bad = None
        while self.backlog:
            bad, t = self.backlog.popleft()
            if self.cusum is not None:
                self._step(bad, t)

    def _arm(self, baseline_bad: float, design: CusumDesign | None) -> None:
        self.baseline_bad = baseline_bad
        if design is None:
            # The baseline is already so bad that the smallest shift cannot happen. Said
            # once, as a warning: the statistic gauge alone (NaN) did not show that this
            # route and evaluator are no longer watched.
            self.disabled = True
            _log.warning("drift_detector_disabled", kind=self.kind, route=self.route,
                         evaluator=self.evaluator, label=self.label,
                         baseline_bad=round(baseline_bad, 4), shift=self.shift)
            return
        self.cusum = BernoulliCusum(design, self.settings.cap_ratio)

    @property
    def design(self) -> CusumDesign | None:
        """The tuned CUSUM, once the baseline is known."""
        return self.cusum.design if self.cusum is not None else None

    @property
    def statistic(self) -> float | None:
        """The CUSUM statistic (log-likelihood ratio), ``None`` during warm-up."""
        return self.cusum.statistic if self.cusum is not None else None

    def observe(self, bad: bool, t: float) -> None:
        """Feed one outcome observed at time ``t``."""
        self.last_seen = t
        if self.cusum is None:
            if self.disabled:
                return
            if self.design_bad is not None:
                self.backlog.append((bad, t))
                return
            self.warm_n += 1
            self.warm_bad += int(bad)
            if self.warm_n >= self.settings.warmup_samples:
                self._arm_or_wait(*learned_baseline(self.warm_bad, self.warm_n,
                                                    self.settings.warmup_margin_z))
            return
        self._step(bad, t)

    def _step(self, bad: bool, t: float) -> None:
        cusum = self.cusum
        if cusum is None:
            return
        cusum.update(bad)
        self.n_since += 1
        h = cusum.design.h
        if not self.firing:
            if cusum.s >= h and self.n_since >= self.settings.min_detect_samples:
                self.firing = True
                self.first_seen = t
                self.pending.append(Transition("firing", t, cusum.statistic))
        elif cusum.s < self.settings.resolve_ratio * h:
            self.firing = False
            self.pending.append(Transition("resolved", t, cusum.statistic))

    def check_stale(self, now: float) -> None:
        """Resolve a firing alert whose stream went quiet for ``stale_after_s``."""
        if (self.firing and self.last_seen is not None
                and now - self.last_seen >= self.settings.stale_after_s):
            self.firing = False
            stat = self.statistic if self.statistic is not None else 0.0
            self.pending.append(Transition("resolved", now, stat, stale=True))
            # Start afresh: a statistic left above the threshold would re-fire on the first
            # result, even a good one, when traffic returns (and flap on quiet streams).
            if self.cusum is not None:
                self.cusum.s = 0
            self.n_since = 0


def learned_baseline(bad: int, n: int, margin_z: float) -> tuple[float, float]:
    """The baseline bad-outcome probability learned from ``bad`` of ``n`` warm-up outcomes.

    Returns ``(estimate, design)``. The estimate is add-half smoothed, so a clean warm-up
    does not mean p0 = 0 (which would make the first failure infinitely surprising). The
    CUSUM is designed at ``design``, the upper ``margin_z``-sigma Wilson bound: a baseline
    underestimated by chance would otherwise make the detector too eager, and streams
    with an unlucky warm-up would raise most of the false alarms.
    """
    estimate = (bad + 0.5) / (n + 1.0)
    if margin_z <= 0.0:
        return estimate, estimate
    return estimate, max(estimate, wilson_interval(bad / n, n, margin_z)[1])
