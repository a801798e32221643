"""Live pass rates, confidence bounds and drift detection (pure: no I/O).

``stats`` holds bucketed sliding windows with Wilson intervals, ``cusum`` the Bernoulli
CUSUM and its threshold from a target false-alarm rate, ``engine`` the per-(route,
evaluator) state that turns results into window estimates and alert transitions.
"""

from evalstream.drift.cusum import (
    BernoulliCusum,
    CusumDesign,
    average_run_length,
    design_cusum,
)
from evalstream.drift.engine import (
    KIND_LABEL_SHARE,
    KIND_PASS_RATE,
    Detector,
    DriftEngine,
    Transition,
    format_window,
)
from evalstream.drift.stats import Z95, SlidingCounts, WindowStats, wilson_interval

__all__ = [
    "KIND_LABEL_SHARE",
    "KIND_PASS_RATE",
    "Z95",
    "BernoulliCusum",
    "CusumDesign",
    "Detector",
    "DriftEngine",
    "SlidingCounts",
    "Transition",
    "WindowStats",
    "average_run_length",
    "design_cusum",
    "format_window",
    "wilson_interval",
]
