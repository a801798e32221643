"""Scoring primitives shared by evaluators: turn a judgement into numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalstream.judges.base import Judgement

__all__ = ["binary_confidence", "normalise", "p_yes", "scale_mean"]


def normalise(weights: Mapping[str, float], options: Sequence[str]) -> dict[str, float]:
    """Renormalise ``weights`` over ``options`` (uniform when they carry no mass)."""
    total = sum(max(0.0, weights.get(o, 0.0)) for o in options)
    if total <= 0.0:
        return {o: 1.0 / len(options) for o in options}
    return {o: max(0.0, weights.get(o, 0.0)) / total for o in options}


def p_yes(judgement: Judgement, yes: str = "yes") -> float:
    """Probability of the ``yes`` option."""
    return judgement.p(yes)


def binary_confidence(p: float) -> float:
    """|p - 0.5| x 2: 0 when undecided, 1 when certain."""
    return min(1.0, abs(p - 0.5) * 2.0)


def scale_mean(judgement: Judgement, low: int, high: int) -> float:
    """The probability-weighted mean over the scale ``low..high`` (options "1".."N")."""
    probs = normalise(judgement.probabilities, [str(i) for i in range(low, high + 1)])
    return sum(int(k) * v for k, v in probs.items())
