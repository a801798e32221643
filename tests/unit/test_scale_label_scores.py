"""``scale_score`` and ``label_score``: turning a judge's distribution into a result.

Checked against the module docstrings: a scale's ``score`` is p(acceptable level),
``passed`` when that is at least one half; a label result's ``score`` is 1 - p(failing).
"""

from __future__ import annotations

import pytest

from evalstream.evaluators.labels import label_score
from evalstream.evaluators.scales import scale_score
from evalstream.events import JudgeInfo
from evalstream.judges.base import Judgement

INFO = JudgeInfo(backend="test", model="m")


def judgement(probs: dict[str, float]) -> Judgement:
    return Judgement(probabilities=probs, info=INFO)


def test_scale_passes_at_exactly_one_half() -> None:
    # p(level <= 2) = 0.5: "passed when that probability is at least one half".
    score = scale_score(judgement({"1": 0.25, "2": 0.25, "4": 0.5}), 5, 2,
                        lower_is_better=True)
    assert score.score == pytest.approx(0.5)
    assert score.passed is True
    assert score.confidence == pytest.approx(0.0)
    assert score.raw_score == pytest.approx(0.25 + 0.5 + 2.0)
    assert score.label == "4"


def test_scale_higher_is_better_counts_levels_at_or_above_the_threshold() -> None:
    score = scale_score(judgement({"2": 0.2, "3": 0.3, "5": 0.5}), 5, 3, lower_is_better=False)
    assert score.score == pytest.approx(0.8)
    assert score.passed is True
    assert score.confidence == pytest.approx(0.6)  # |p - 0.5| x 2
    assert score.threshold == 3.0
    assert score.details == {"margin": pytest.approx(0.2)}


def test_scale_ignores_levels_outside_the_scale() -> None:
    # A judge leaking mass onto "0" or "6": neither is a level of a 1-5 scale.
    score = scale_score(judgement({"0": 0.6, "1": 0.2, "5": 0.2, "6": 0.9}), 5, 1,
                        lower_is_better=True)
    assert set(score.probabilities) == {"1", "2", "3", "4", "5"}
    assert score.score == pytest.approx(0.5)
    assert score.raw_score == pytest.approx(3.0)
    assert score.label == "1"  # a tie goes to the earlier (lower) level
    assert score.details == {"margin": pytest.approx(0.0)}


def test_label_without_fail_labels_only_classifies() -> None:
    score = label_score(judgement({"b": 0.5, "a": 0.3, "other": 0.2, "x": 5.0}),
                        ("a", "b", "other"), ())
    assert (score.score, score.passed, score.label) == (None, None, "b")
    assert score.probabilities == pytest.approx({"a": 0.3, "b": 0.5, "other": 0.2})
    assert score.confidence == pytest.approx(0.2)  # top minus runner-up


def test_label_passed_follows_the_top_label_and_score_the_failing_mass() -> None:
    # The top label passes although failing labels hold more mass in total.
    score = label_score(judgement({"a": 0.4, "b": 0.3, "c": 0.3}), ("a", "b", "c"), ("b", "c"))
    assert score.label == "a"
    assert score.passed is True
    assert score.score == pytest.approx(0.4)
    # A failing label the options do not have is ignored, not an error.
    score = label_score(judgement({"a": 0.1, "b": 0.9}), ("a", "b"), ("b", "zzz"))
    assert (score.label, score.passed) == ("b", False)
    assert score.score == pytest.approx(0.1)


def test_label_with_a_single_option_is_certain() -> None:
    score = label_score(judgement({"only": 0.7}), ("only",), ())
    assert score.label == "only"
    assert score.confidence == pytest.approx(1.0)
