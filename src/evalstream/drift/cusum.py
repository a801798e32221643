"""Bernoulli CUSUM with a threshold set from a target false-alarm rate (pure, no I/O).

The detector watches a stream of "bad" outcomes (a failed evaluation, or an off-topic
label) whose baseline probability is ``p0`` and raises an alarm when the evidence for a rise
to ``p1 = p0 + shift`` is strong enough. It accumulates the log-likelihood ratio of each
observation (Page's CUSUM): ``S = max(0, S + log(p1/p0))`` on a bad outcome and
``S = max(0, S + log((1-p1)/(1-p0)))`` on a good one, alarming at ``S >= h``.

The two steps are scaled to small integers (Reynolds & Stoumbos' integer-valued Bernoulli
CUSUM), which makes the statistic a Markov chain on ``0..H-1``: the in-control average run
length (ARL0: observations between false alarms) is then computed exactly by solving a
banded linear system, and ``H`` is the smallest threshold whose ARL0 meets the target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "BernoulliCusum",
    "CusumDesign",
    "average_run_length",
    "cached_design",
    "design_cusum",
    "is_designed",
]

# Bounds the integer steps, hence the size of the Markov chain solved in pure Python.
_MAX_DENOMINATOR = 8


@dataclass(frozen=True, slots=True)
class CusumDesign:
    """A tuned integer CUSUM: step ``up`` on a bad outcome, ``-down`` on a good one."""

    p0: float
    p1: float
    up: int
    down: int
    #: Alarm threshold in integer units.
    h: int
    #: Log-likelihood ratio per unit, to report the statistic on the natural scale.
    unit: float
    #: In-control ARL of this design (observations between false alarms, exact).
    arl0: float

    @property
    def threshold(self) -> float:
        """The alarm threshold on the log-likelihood-ratio scale."""
        return self.h * self.unit


def average_run_length(p: float, up: int, down: int, h: int) -> float:
    """Expected observations until ``S >= h`` starting at 0, for bad-outcome probability ``p``.

    Solves ``L_i = 1 + p L_{i+up} + (1-p) L_{max(0, i-down)}`` (``L_j = 0`` for ``j >= h``)
    by banded Gaussian elimination; the matrix is a non-singular M-matrix, so elimination
    without pivoting is stable.
    """
    if h <= 0:
        return 1.0
    q = 1.0 - p
    width = down + up + 1  # band: columns i-down .. i+up, stored at offset col - i + down
    rows = [[0.0] * width for _ in range(h)]
    rhs = [1.0] * h
    for i in range(h):
        row = rows[i]
        row[down] += 1.0
        row[max(0, i - down) - i + down] -= q
        if i + up < h:
            row[up + down] -= p
    for k in range(h):
        pivot_row = rows[k]
        pivot = pivot_row[down]
        for r in range(k + 1, min(h, k + down + 1)):
            row = rows[r]
            off = k - r + down  # column k in row r's band
            factor = row[off] / pivot
            if factor == 0.0:
                continue
            # columns k..k+up: in row k at offsets down..down+up, in row r shifted by off-down
            shift = off - down
            for c in range(down, min(width, down + up + 1, down + h - k)):
                row[c + shift] -= factor * pivot_row[c]
            rhs[r] -= factor * rhs[k]
    result = [0.0] * h
    for k in range(h - 1, -1, -1):
        row = rows[k]
        acc = rhs[k]
        for c in range(1, min(up, h - 1 - k) + 1):
            acc -= row[down + c] * result[k + c]
        result[k] = acc / row[down]
    return result[0]


def _steps(p0: float, p1: float) -> tuple[int, int, float]:
    llr_bad = math.log(p1 / p0)
    llr_good = math.log((1.0 - p0) / (1.0 - p1))  # magnitude of the (negative) step
    small = min(llr_bad, llr_good)
    ratio = max(llr_bad, llr_good) / small
    # The integer steps approximate the LLR ratio; the smallest denominator within 2% keeps
    # the chain (and the solve, ~ h * up * down) small. The ARL is exact for the integer
    # chain actually used, so the approximation only costs a little optimality.
    for den in range(1, _MAX_DENOMINATOR + 1):
        frac = Fraction(ratio).limit_denominator(den)
        if abs(float(frac) - ratio) <= 0.02 * ratio:
            break
    big_units, small_units = max(frac.numerator, 1), max(frac.denominator, 1)
    unit = small / small_units
    if llr_bad >= llr_good:
        return big_units, small_units, unit
    return small_units, big_units, unit


def _design(p0: float, p1: float, arl0: float) -> CusumDesign:
    up, down, unit = _steps(p0, p1)
    # ARL0 grows with h; the Wald bound ARL0 >= exp(h*unit) caps the search.
    hi = max(1, math.ceil(math.log(arl0) / unit) + 1)
    while average_run_length(p0, up, down, hi) < arl0:  # pragma: no cover - bound holds
        hi *= 2
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if average_run_length(p0, up, down, mid) >= arl0:
            hi = mid
        else:
            lo = mid
    return CusumDesign(p0=p0, p1=p1, up=up, down=down, h=hi, unit=unit,
                       arl0=average_run_length(p0, up, down, hi))


def design_cusum(p0: float, shift: float, arl0: float) -> CusumDesign | None:
    """Tune a CUSUM for a rise of the bad-outcome probability from ``p0`` by ``shift``.

    Args:
        p0: Baseline probability of a bad outcome (e.g. 1 - baseline pass rate).
        shift: Smallest absolute rise worth detecting.
        arl0: Target average number of in-control observations between false alarms.

    Returns:
        The design, or ``None`` when ``p0`` leaves no room for the rise (p0 + shift >= 1).
    """
    key = _key(p0, shift, arl0)
    found, design = _lookup(key)
    if not found:
        design = None if key[1] >= 0.999 else _design(*key)
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = design
    return design


def cached_design(p0: float, shift: float, arl0: float) -> tuple[bool, CusumDesign | None]:
    """``(True, design_cusum(...))`` if that answer is cached, else ``(False, None)``.

    Never solves: the event loop uses it so that only the monitor's thread pays for a solve.
    """
    return _lookup(_key(p0, shift, arl0))


def is_designed(p0: float, shift: float, arl0: float) -> bool:
    """True when ``design_cusum`` would answer from its cache (no solve needed)."""
    return _key(p0, shift, arl0) in _CACHE


def _lookup(key: tuple[float, float, float]) -> tuple[bool, CusumDesign | None]:
    # One dict operation, never "in" then "[]": the monitor's solver thread may clear the
    # cache between the two, and the loop would get a KeyError.
    try:
        return True, _CACHE[key]
    except KeyError:
        return False, None


def _key(p0: float, shift: float, arl0: float) -> tuple[float, float, float]:
    # Rounding the inputs lets nearby baselines share one cached design.
    p0 = min(max(round(p0, 4), 1e-4), 0.9999)
    return p0, round(p0 + shift, 4), float(arl0)


# Designs by rounded inputs. A solve can take up to about a second for extreme settings
# (tiny baselines and shifts), so the monitor precomputes them off the event loop.
_CACHE: dict[tuple[float, float, float], CusumDesign | None] = {}
_CACHE_SIZE = 1024


class BernoulliCusum:
    """The running statistic of one integer CUSUM design.

    Args:
        design: The integer increments and threshold ``h``.
        cap_ratio: The statistic never rises above ``ceil(cap_ratio * h)``, so a long
            incident resolves in bounded time once the rate recovers (``drift.cap_ratio``);
            infinite (the default) for no cap.
    """

    __slots__ = ("_cap", "design", "s")

    def __init__(self, design: CusumDesign, cap_ratio: float = math.inf) -> None:
        self.design = design
        self.s = 0
        self._cap: float = math.inf if math.isinf(cap_ratio) else math.ceil(cap_ratio * design.h)

    def update(self, bad: bool) -> None:
        """Add one observation."""
        d = self.design
        self.s = int(min(self.s + d.up, self._cap)) if bad else max(0, self.s - d.down)

    @property
    def statistic(self) -> float:
        """The statistic on the log-likelihood-ratio scale."""
        return self.s * self.design.unit

    @property
    def alarm(self) -> bool:
        """True when the statistic is at or above the threshold."""
        return self.s >= self.design.h
