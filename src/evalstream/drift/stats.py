"""Pass rates over sliding time windows, with Wilson intervals (pure, no I/O).

A window is a ring of fixed-width time buckets, so memory per (route, evaluator) is bounded
by ``largest window / bucket width`` whatever the traffic. Observations carry a weight
(``1 / sample_rate``): the weighted share is an unbiased estimate of the population's pass
rate when routes sample at different rates. The interval's effective sample size
(:func:`interval_n`) is the smaller of Kish's ``(sum w)**2 / sum w**2`` and the linearised
(Taylor) one of the weighted proportion, so heavily weighted (rarely sampled) observations
do not buy false precision: Kish's alone assumes every stratum varies as the mix does and
was too narrow (90.7% and 88.0% coverage for a nominal 95% in simulations) when a rarely
sampled stratum's pass rate differed from the rest; the linearised one alone was too narrow
(85-91%) when a rarely sampled stratum held few observations, all of one outcome (its
variance then reads 0). The smaller of the two covered 95% or more in both cases; at one
sample rate both equal the count. ``tests/unit/test_weighted_interval.py`` has the
simulation.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["Z95", "SlidingCounts", "WindowStats", "interval_n", "kish_n", "weighted_share",
           "wilson_interval"]

#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054


def wilson_interval(p: float, n: float, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a proportion ``p`` observed over ``n`` trials.

    ``n`` may be fractional (an effective sample size). Unlike the normal approximation it
    stays inside [0, 1] and is sensible at p = 0 or 1 and for small n.

    Args:
        p: Observed proportion, 0..1.
        n: (Effective) number of trials, > 0.
        z: Normal quantile; 1.96 for 95%.

    Returns:
        ``(lower, upper)``.
    """
    if n <= 0:
        raise ValueError("wilson_interval needs n > 0")
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(max(p * (1.0 - p) / n + z2 / (4.0 * n * n), 0.0)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def kish_n(w: float, w2: float) -> float:
    """Kish's effective sample size ``w**2 / w2``: how much data a weighted sample holds
    whatever its outcomes (the count itself at one weight).

    Args:
        w: Sum of the weights, > 0.
        w2: Sum of the squared weights, > 0.
    """
    return w * w / w2


def interval_n(w_hit: float, w: float, w2_hit: float, w2: float) -> float:
    """The effective sample size of a weighted share's interval: the smaller of Kish's and
    the linearised one, ``p(1 - p) / Var(p)`` with the Taylor variance of the weighted
    (Hajek) proportion ``Var(p) = sum w**2 (y - p)**2 / W**2``. In per-outcome sums
    (``W_h``/``W_m`` the hits'/misses' weights, ``S_h``/``S_m`` their squares)::

        n_lin = W_h W_m W**2 / (S_h W_m**2 + S_m W_h**2)

    At one weight both equal the count. ``n_lin`` is undefined at a share of 0 or 1, and
    reads a stratum with few observations, all of one outcome, as certain: Kish's then
    bounds it (see the module docstring for the coverage each gives alone).

    Args:
        w_hit: Sum of the hits' weights.
        w: Sum of all weights, > 0.
        w2_hit: Sum of the hits' squared weights.
        w2: Sum of all squared weights, > 0.
    """
    kish = kish_n(w, w2)
    w_miss = w - w_hit
    denominator = w2_hit * w_miss * w_miss + (w2 - w2_hit) * w_hit * w_hit
    if w_hit <= 0.0 or w_miss <= 0.0 or denominator <= 0.0:
        return kish
    return min(kish, w_hit * w_miss * w * w / denominator)


def weighted_share(w_hit: float, w: float, w2_hit: float, w2: float
                   ) -> tuple[float, float, float]:
    """The weighted share of hits and its Wilson 95% interval on :func:`interval_n`:
    ``(rate, lower, upper)``.

    Args:
        w_hit: Sum of the hits' weights.
        w: Sum of all weights, > 0.
        w2_hit: Sum of the hits' squared weights.
        w2: Sum of all squared weights, > 0.
    """
    rate = min(1.0, max(0.0, w_hit / w))
    lower, upper = wilson_interval(rate, interval_n(w_hit, w, w2_hit, w2))
    return rate, lower, upper


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A window's estimate. ``rate`` etc. are ``None`` when there is not enough data.

    ``n`` counts the observations (``min_samples`` applies to it) and ``n_eff`` is Kish's
    effective sample size (:func:`kish_n`), how much data the window holds whatever its
    outcomes; the interval uses :func:`interval_n`, which is at most ``n_eff``.
    """

    n: int
    weight: float
    n_eff: float
    rate: float | None
    lower: float | None
    upper: float | None

    @property
    def enough(self) -> bool:
        """True when the window held enough evaluations to report a rate."""
        return self.rate is not None


@dataclass(slots=True)
class _Bucket:
    index: int
    n: int = 0
    w: float = 0.0
    w2: float = 0.0
    w_hit: float = 0.0
    w2_hit: float = 0.0


class SlidingCounts:
    """Weighted hit/miss counts in time buckets, covering the last ``horizon_s`` seconds.

    Args:
        bucket_s: Bucket width in seconds; windows are whole numbers of buckets.
        horizon_s: The largest window that will be asked for.
    """

    def __init__(self, bucket_s: int, horizon_s: int) -> None:
        if bucket_s < 1 or horizon_s < bucket_s:
            raise ValueError("need 1 <= bucket_s <= horizon_s")
        self._bucket_s = bucket_s
        self._span = -(-horizon_s // bucket_s)  # buckets kept, ceil
        self._buckets: deque[_Bucket] = deque()
        self.last_t: float | None = None

    def add(self, t: float, hit: bool, weight: float = 1.0) -> None:
        """Count one observation at time ``t`` (seconds) with the given weight."""
        idx = math.floor(t / self._bucket_s)
        buckets = self._buckets
        if buckets and idx <= buckets[-1].index:
            # Clocks may step back a little; never reorder, count it in the newest bucket.
            bucket = buckets[-1]
        else:
            bucket = _Bucket(idx)
            buckets.append(bucket)
            self._prune(idx)
        squared = weight * weight
        bucket.n += 1
        bucket.w += weight
        bucket.w2 += squared
        if hit:
            bucket.w_hit += weight
            bucket.w2_hit += squared
        self.last_t = t if self.last_t is None else max(self.last_t, t)

    def _prune(self, now_idx: int) -> None:
        while self._buckets and self._buckets[0].index <= now_idx - self._span:
            self._buckets.popleft()

    def stats(self, now: float, window_s: int, min_samples: int) -> WindowStats:
        """The weighted hit rate over the last ``window_s`` seconds at time ``now``.

        Args:
            now: Current time in seconds (same clock as ``add``).
            window_s: Window length; rounded up to whole buckets, the newest one partial.
            min_samples: Below this many observations the rate is ``None``: a small window
                says "not enough data", never 0.
        """
        now_idx = math.floor(now / self._bucket_s)
        self._prune(now_idx)
        oldest = now_idx - (-(-window_s // self._bucket_s))
        n, w, w2, w_hit, w2_hit = 0, 0.0, 0.0, 0.0, 0.0
        for bucket in reversed(self._buckets):
            if bucket.index <= oldest:
                break
            n += bucket.n
            w += bucket.w
            w2 += bucket.w2
            w_hit += bucket.w_hit
            w2_hit += bucket.w2_hit
        if n == 0 or w <= 0.0:
            return WindowStats(0, 0.0, 0.0, None, None, None)
        n_eff = kish_n(w, w2)
        if n < min_samples:
            return WindowStats(n, w, n_eff, None, None, None)
        return WindowStats(n, w, n_eff, *weighted_share(w_hit, w, w2_hit, w2))

    def __len__(self) -> int:
        return len(self._buckets)
