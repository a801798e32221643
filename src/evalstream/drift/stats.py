"""Pass rates over sliding time windows, with Wilson intervals (pure, no I/O).

A window is a ring of fixed-width time buckets, so memory per (route, evaluator) is bounded
by ``largest window / bucket width`` whatever the traffic. Observations carry a weight
(``1 / sample_rate``): the weighted share is an unbiased estimate of the population's pass
rate when routes sample at different rates, and the interval uses Kish's effective sample
size so heavily weighted (rarely sampled) observations do not buy false precision.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["Z95", "SlidingCounts", "WindowStats", "weighted_share", "wilson_interval"]

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


def weighted_share(w_hit: float, w: float, w2: float) -> tuple[float, float, float]:
    """The weighted share of hits and its Wilson 95% interval on Kish's effective sample
    size ``w**2 / w2``: ``(rate, lower, upper)``.

    Args:
        w_hit: Sum of the hits' weights.
        w: Sum of all weights, > 0.
        w2: Sum of the squared weights.
    """
    rate = min(1.0, max(0.0, w_hit / w))
    lower, upper = wilson_interval(rate, w * w / w2)
    return rate, lower, upper


@dataclass(frozen=True, slots=True)
class WindowStats:
    """A window's estimate. ``rate`` etc. are ``None`` when there is not enough data."""

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
        bucket.n += 1
        bucket.w += weight
        bucket.w2 += weight * weight
        if hit:
            bucket.w_hit += weight
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
        n, w, w2, w_hit = 0, 0.0, 0.0, 0.0
        for bucket in reversed(self._buckets):
            if bucket.index <= oldest:
                break
            n += bucket.n
            w += bucket.w
            w2 += bucket.w2
            w_hit += bucket.w_hit
        if n == 0 or w <= 0.0:
            return WindowStats(0, 0.0, 0.0, None, None, None)
        n_eff = w * w / w2
        if n < min_samples:
            return WindowStats(n, w, n_eff, None, None, None)
        return WindowStats(n, w, n_eff, *weighted_share(w_hit, w, w2))

    def __len__(self) -> int:
        return len(self._buckets)
