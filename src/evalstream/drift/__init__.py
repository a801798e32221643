"""Live pass rates, confidence bounds and drift detection (pure: no I/O).

``stats`` holds bucketed sliding windows with Wilson intervals, ``cusum`` the Bernoulli
CUSUM and its threshold from a target false-alarm rate, ``mix`` a G-test of a label mix,
``detector`` one CUSUM with alert hysteresis on one bad/good outcome stream, ``engine`` the
per-(route, evaluator) state that turns results into window estimates and alerts.
"""

from evalstream.drift.cusum import (
    BernoulliCusum,
    CusumDesign,
    average_run_length,
    design_cusum,
)
from evalstream.drift.detector import Detector, Transition, learned_baseline
from evalstream.drift.engine import (
    KIND_LABEL_MIX,
    KIND_LABEL_SHARE,
    KIND_PASS_RATE,
    DriftEngine,
    format_window,
)
from evalstream.drift.mix import LabelVocabulary, LabelWindow, MixDetector, chi2_sf, g_test
from evalstream.drift.stats import Z95, SlidingCounts, WindowStats, wilson_interval

__all__ = [
    "KIND_LABEL_MIX",
    "KIND_LABEL_SHARE",
    "KIND_PASS_RATE",
    "Z95",
    "BernoulliCusum",
    "CusumDesign",
    "Detector",
    "DriftEngine",
    "LabelVocabulary",
    "LabelWindow",
    "MixDetector",
    "SlidingCounts",
    "Transition",
    "WindowStats",
    "average_run_length",
    "chi2_sf",
    "design_cusum",
    "format_window",
    "g_test",
    "learned_baseline",
    "wilson_interval",
]
