"""A G-test of a label evaluator's live label mix against its baseline mix (pure, no I/O).

The share CUSUM (``cusum``) watches one label, e.g. ``other``; this test catches any change
of the mix (billing questions turning into shipping complaints). The live window's label
counts are compared with the baseline's proportions by the likelihood-ratio G statistic,
chi-square distributed with k-1 degrees of freedom when nothing changed. The test runs at
every monitor tick on an overlapping window, so its significance level must be small
(default 1e-6) to keep false alarms rare; hysteresis resolves it at a much larger p.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "LabelVocabulary",
    "LabelWindow",
    "MixDetector",
    "MixResult",
    "chi2_isf",
    "chi2_sf",
    "g_test",
]

_TINY = 1e-300
#: Labels beyond this many distinct values collapse to one bucket (bounded memory).
MAX_LABELS = 64
_OVERFLOW = "(more)"


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X ~ chi-square(df): the regularised upper incomplete gamma Q(df/2, x/2).

    Series expansion below a + 1, Lentz's continued fraction above (Numerical Recipes §6.2).
    """
    if df <= 0:
        raise ValueError("df must be positive")
    if x <= 0.0:
        return 1.0
    a, z = df / 2.0, x / 2.0
    log_prefix = -z + a * math.log(z) - math.lgamma(a)
    if z < a + 1.0:
        term = total = 1.0 / a
        ap = a
        for _ in range(1000):
            ap += 1.0
            term *= z / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    b = z + 1.0 - a
    c = 1.0 / _TINY
    d = 1.0 / b
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = d if abs(d) > _TINY else _TINY
        c = b + an / c
        c = c if abs(c) > _TINY else _TINY
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_prefix) * h)


def chi2_isf(p: float, df: int) -> float:
    """The x with ``chi2_sf(x, df) == p`` (bisection; the alert's threshold)."""
    lo, hi = 0.0, max(1.0, float(df))
    while chi2_sf(hi, df) > p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if chi2_sf(mid, df) > p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-9 * hi:
            break
    return hi


@dataclass(frozen=True, slots=True)
class MixResult:
    """One G-test: the statistic, its p-value, and the label that moved most."""

    g: float
    df: int
    p_value: float
    n: int
    label: str
    baseline_share: float
    share: float


def g_test(counts: Counter[str], baseline: Counter[str]) -> MixResult | None:
    """Two-sample G-test: were ``counts`` and ``baseline`` drawn from the same label mix?

    A test of independence on the 2 x k table (baseline, live) x labels, with (k - 1)
    degrees of freedom. Testing the live counts against the baseline's proportions as if
    they were exact would count only the live window's noise: with many labels and a
    warm-up of a few thousand, the baseline's own sampling error then makes a mix that
    never changed drift out of the acceptance region as the window fills, and the alert
    fires and never resolves. A label seen on one side only is an ordinary cell here,
    never an infinite statistic. When both sides hold the same single label the mixes are
    identical: G = 0, p = 1 (df 0), which resolves an alert raised while a second label
    appeared. Returns ``None`` when there is nothing to compare (no live or no baseline
    counts).
    """
    n = sum(counts.values())
    base_n = sum(baseline.values())
    labels = sorted(set(baseline) | set(counts))
    if n == 0 or base_n == 0:
        return None
    if len(labels) == 1:
        return MixResult(g=0.0, df=0, p_value=1.0, n=n, label=labels[0],
                         baseline_share=1.0, share=1.0)
    total = n + base_n
    g = 0.0
    top, top_departure = labels[0], -math.inf
    for label in labels:
        observed, before = counts.get(label, 0), baseline.get(label, 0)
        pooled = (observed + before) / total
        for count, row in ((observed, n), (before, base_n)):
            if count:
                g += count * math.log(count / (row * pooled))
        # The label whose live count departs most from the pooled share explains the alert.
        expected = n * pooled
        departure = abs(observed - expected) / math.sqrt(expected)
        if departure > top_departure:
            top, top_departure = label, departure
    g = max(0.0, 2.0 * g)
    df = len(labels) - 1
    return MixResult(g=g, df=df, p_value=chi2_sf(g, df), n=n, label=top,
                     baseline_share=baseline.get(top, 0) / base_n,
                     share=counts.get(top, 0) / n)


class LabelVocabulary:
    """The first ``max_labels`` distinct labels; any later label maps to one overflow bucket.

    A window and the baseline it is tested against must share one vocabulary: collapsing
    labels in one and not the other makes the overflow bucket look like a brand-new label
    and the G-test fire for good.
    """

    def __init__(self, max_labels: int = MAX_LABELS) -> None:
        self._max = max_labels
        self._seen: set[str] = set()

    def map(self, label: str) -> str:
        """``label`` itself if known or there is room for it, else the overflow bucket."""
        if label not in self._seen:
            if len(self._seen) >= self._max:
                return _OVERFLOW
            self._seen.add(label)
        return label


class LabelWindow:
    """Label counts in time buckets over the last ``horizon_s`` seconds.

    Args:
        bucket_s: Bucket width in seconds.
        horizon_s: Longest window ever asked for.
        vocabulary: Bounds the distinct labels kept; share it with the ``MixDetector``
            whose baseline this window is compared with.
    """

    def __init__(self, bucket_s: int, horizon_s: int,
                 vocabulary: LabelVocabulary | None = None) -> None:
        self._bucket_s = bucket_s
        self._span = -(-horizon_s // bucket_s)
        self._buckets: deque[tuple[int, Counter[str]]] = deque()
        self.vocabulary = vocabulary if vocabulary is not None else LabelVocabulary()

    def add(self, t: float, label: str) -> None:
        """Count ``label`` at time ``t``."""
        label = self.vocabulary.map(label)
        idx = math.floor(t / self._bucket_s)
        if not self._buckets or idx > self._buckets[-1][0]:
            self._buckets.append((idx, Counter()))
            while self._buckets[0][0] <= idx - self._span:
                self._buckets.popleft()
        self._buckets[-1][1][label] += 1

    def counts(self, now: float, window_s: int) -> Counter[str]:
        """Label counts over the last ``window_s`` seconds."""
        now_idx = math.floor(now / self._bucket_s)
        oldest = now_idx - (-(-window_s // self._bucket_s))
        total: Counter[str] = Counter()
        for idx, bucket in reversed(self._buckets):
            if idx <= oldest:
                break
            total.update(bucket)
        return total


@dataclass(slots=True)
class MixDetector:
    """Baseline mix from the first ``warmup`` labels, then a G-test at every ``check``.

    ``vocabulary`` must be the one of the ``LabelWindow`` passed to ``check``, so labels
    beyond ``MAX_LABELS`` collapse the same way in the baseline and in the live window.
    """

    route: str
    evaluator: str
    warmup: int
    alpha: float
    resolve_p: float
    min_samples: int
    window_s: int
    kind: str = "label_mix"
    vocabulary: LabelVocabulary = field(default_factory=LabelVocabulary)
    baseline: Counter[str] = field(default_factory=Counter)
    armed: bool = False
    firing: bool = False
    first_seen: float | None = None
    last_seen: float | None = None
    last: MixResult | None = None
    #: When the window last held ``min_samples`` labels to test (see ``check_stale``).
    last_tested: float | None = None
    pending: list[tuple[Literal["firing", "resolved"], float, MixResult | None]] = field(
        default_factory=list)

    @property
    def statistic(self) -> float | None:
        """The latest G statistic (``None`` before the first test)."""
        return self.last.g if self.last is not None else None

    @property
    def baseline_bad(self) -> float | None:
        """Not a single-share detector: no baseline probability to export."""
        return None

    def observe(self, label: str, t: float) -> None:
        """Count one label towards the baseline during warm-up."""
        self.last_seen = t
        if not self.armed:
            self.baseline[self.vocabulary.map(label)] += 1
            self.armed = sum(self.baseline.values()) >= self.warmup

    def check(self, window: LabelWindow, now: float) -> None:
        """Test the live window and record a firing/resolved transition if the state flips."""
        if not self.armed:
            return
        counts = window.counts(now, self.window_s)
        result = g_test(counts, self.baseline) if sum(counts.values()) >= self.min_samples \
            else None
        self.last = result
        if result is None:
            return
        self.last_tested = now
        if not self.firing and result.p_value < self.alpha:
            self.firing, self.first_seen = True, now
            self.pending.append(("firing", now, result))
        elif self.firing and result.p_value > self.resolve_p:
            self.firing = False
            self.pending.append(("resolved", now, result))

    def check_stale(self, now: float, stale_after_s: float) -> None:
        """Resolve a firing alert whose stream went quiet for ``stale_after_s``, or whose
        window held too few labels to test (``min_samples``) that long: a stream thinned to
        a result now and then is never quiet, and without a test it never resolved."""
        if self.firing and any(t is not None and now - t >= stale_after_s
                               for t in (self.last_seen, self.last_tested)):
            self.firing = False
            self.pending.append(("resolved", now, None))

    def threshold(self) -> float | None:
        """The G value at which the test fires, for the current degrees of freedom (None
        before the first test, or when a single label leaves none)."""
        last = self.last
        return chi2_isf(self.alpha, last.df) if last is not None and last.df else None
