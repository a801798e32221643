"""The scoring primitives evaluators share (``judges/scoring.py``).

Judges may leak mass onto tokens that are not options and backends' top tokens need not sum
to one, so these check renormalisation with weights that are NOT already a distribution.
"""

from __future__ import annotations

import pytest

from evalstream.events import JudgeInfo
from evalstream.judges.base import Judgement
from evalstream.judges.scoring import binary_confidence, normalise, p_yes, scale_mean


def judgement(probs: dict[str, float]) -> Judgement:
    return Judgement(probabilities=probs, info=JudgeInfo(backend="test", model="m"))


def test_normalise_rescales_over_the_options_only() -> None:
    # 3:1 between the options; "maybe" is not an option and must not dilute them.
    probs = normalise({"yes": 0.3, "no": 0.1, "maybe": 0.6}, ["yes", "no"])
    assert probs == pytest.approx({"yes": 0.75, "no": 0.25})
    # Weights above 1 (a backend's raw scores) are rescaled, not used as they are.
    assert normalise({"yes": 3.0, "no": 1.0}, ["yes", "no"]) == pytest.approx(
        {"yes": 0.75, "no": 0.25})


def test_normalise_ignores_negative_weights() -> None:
    probs = normalise({"a": 0.5, "b": -0.5, "c": 0.5}, ["a", "b", "c"])
    assert probs == pytest.approx({"a": 0.5, "b": 0.0, "c": 0.5})


@pytest.mark.parametrize("weights", [{}, {"other": 1.0}, {"a": 0.0, "b": -1.0}])
def test_normalise_without_mass_on_the_options_is_uniform(weights: dict[str, float]) -> None:
    probs = normalise(weights, ["a", "b", "c", "d"])
    assert probs == pytest.approx(dict.fromkeys("abcd", 0.25))


def test_p_yes_reads_the_named_option() -> None:
    answer = judgement({"yes": 0.8, "no": 0.2})
    assert p_yes(answer) == pytest.approx(0.8)
    assert p_yes(answer, yes="no") == pytest.approx(0.2)


@pytest.mark.parametrize(("p", "confidence"), [
    (0.5, 0.0), (0.75, 0.5), (0.25, 0.5), (1.0, 1.0), (0.0, 1.0), (1.2, 1.0)])
def test_binary_confidence(p: float, confidence: float) -> None:
    assert binary_confidence(p) == pytest.approx(confidence)


def test_scale_mean_is_the_expected_level_within_the_scale() -> None:
    assert scale_mean(judgement({"1": 0.5, "5": 0.5}), 1, 5) == pytest.approx(3.0)
    # Mass on levels outside low..high (a "6", a "0") is not part of the scale.
    assert scale_mean(judgement({"1": 0.25, "5": 0.25, "6": 0.4, "0": 0.1}), 1, 5) == \
        pytest.approx(3.0)
    # Unnormalised level weights are renormalised: 2 x level 2 + 2 x level 4 -> mean 3.
    assert scale_mean(judgement({"2": 2.0, "4": 2.0}), 1, 5) == pytest.approx(3.0)
    assert scale_mean(judgement({"0": 0.3, "1": 0.7}), 0, 1) == pytest.approx(0.7)
