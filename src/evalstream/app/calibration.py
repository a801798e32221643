"""Canaries: gold-labelled events that check the judge inside the stream.

A canary is an event whose attributes say ``evalstream.canary: "true"`` and carry gold
answers, ``evalstream.gold.<evaluator name>``: ``"true"``/``"false"`` for binary evaluators
(``true`` = the desirable outcome, compared with ``passed``), a class label for label
evaluators (compared with ``label``). The pipeline evaluates canaries whatever the sampling
rate and keeps them out of traffic counts (outcomes, weighted outcomes, scores, labels,
pass-rate windows, drift); their results are compared with the gold answer here and
counted in the ``evalstream_canary_...`` metrics, as sums from which Prometheus computes
agreement, mean Brier score and expected calibration error (ECE) over any window.

The comparison is the one ``evalstream eval`` reports (``app/offline_report.py`` uses
:func:`compare`): Brier on the probability of passing (binary) or over ``probabilities``
(multi-class), ECE over 10 equal-width bins of the confidence in the predicted class.
Gold values and markers are user input: a bad one is counted, never raised or logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple, Protocol

from prometheus_client import Counter

from evalstream.events import CANARY_ATTRIBUTE, GOLD_ATTRIBUTE_PREFIX
from evalstream.metrics import Metrics

__all__ = [
    "BIN_LABELS",
    "ECE_BINS",
    "MAX_GOLD_CHARS",
    "Calibration",
    "CanaryGold",
    "Comparison",
    "Forecast",
    "Series",
    "canary_marker",
    "compare",
    "confidence_bin",
    "gold_keys",
    "parse_gold",
    "parse_result_gold",
    "read_gold",
]

#: Bins of the expected calibration error (equal width over the confidence).
ECE_BINS = 10
#: The ``bin`` label of each bin: its lower edge.
BIN_LABELS = tuple(f"{b / ECE_BINS:.1f}" for b in range(ECE_BINS))
#: A gold class label longer than this is refused (a label evaluator without a closed set).
MAX_GOLD_CHARS = 256
_BINARY = {"true": True, "false": False}

GoldProblem = Literal["no_gold", "invalid_gold"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One result compared with its gold answer."""

    gold: str
    predicted: str
    #: The Brier score of the forecast (binary: on p(pass); label: summed over classes).
    brier: float
    #: The forecast's probability of the class it predicted, clipped to 0..1.
    confidence: float

    @property
    def correct(self) -> bool:
        """Whether the prediction matched the gold answer."""
        return self.gold == self.predicted


class Forecast(Protocol):
    """What a comparison reads of a result (an :class:`EvalResult` is one)."""

    @property
    def status(self) -> str:
        """``ok`` or ``error``."""
        ...

    @property
    def passed(self) -> bool | None:
        """Binary evaluators: the verdict."""
        ...

    @property
    def score(self) -> float | None:
        """Binary evaluators: the probability of passing."""
        ...

    @property
    def label(self) -> str | None:
        """Label evaluators: the predicted class."""
        ...

    @property
    def probabilities(self) -> Mapping[str, float]:
        """Label evaluators: the probability of each class."""
        ...


def compare(result: Forecast, gold: bool | str) -> Comparison | None:
    """Compare an ok result with a gold answer, or None when it gives nothing to compare.

    Binary (``gold`` a bool): needs ``passed``; the forecast is ``score`` = p(pass) (or
    ``passed`` itself when there is no score). Label (``gold`` a str): needs ``label`` and
    ``probabilities``; the Brier score sums over the classes of both.
    """
    if isinstance(gold, bool):
        if result.passed is None:
            return None
        p_good = result.score if result.score is not None else float(result.passed)
        return Comparison(str(gold).lower(), str(result.passed).lower(),
                          (p_good - float(gold)) ** 2,
                          _clip(p_good if result.passed else 1 - p_good))
    if result.label is None or not result.probabilities:
        return None
    probs = result.probabilities
    brier = sum((probs.get(k, 0.0) - float(k == gold)) ** 2 for k in set(probs) | {gold})
    return Comparison(gold, result.label, brier, _clip(probs.get(result.label, 0.0)))


def confidence_bin(confidence: float, bins: int = ECE_BINS) -> int:
    """The equal-width bin of ``confidence`` (0..1; 1.0 falls in the last bin)."""
    return min(bins - 1, max(0, int(confidence * bins)))


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def canary_marker(attributes: Mapping[str, str]) -> bool | None:
    """Whether the attributes mark a canary: True, False (unmarked, or ``"false"``), or
    None when the marker is there with another value (then the event is not a canary)."""
    value = attributes.get(CANARY_ATTRIBUTE)
    if value is None:
        return False
    return _BINARY.get(value.strip().lower())


def gold_keys(attributes: Mapping[str, str]) -> list[str]:
    """The evaluator names that gold attributes are given for."""
    n = len(GOLD_ATTRIBUTE_PREFIX)
    return [k[n:] for k in attributes if k.startswith(GOLD_ATTRIBUTE_PREFIX)]


@dataclass(frozen=True, slots=True)
class CanaryGold:
    """A canary evaluation's gold answer, read when it was planned."""

    #: The gold answer (a bool for binary evaluators, a class for label ones), or None.
    value: bool | str | None
    #: Why there is none: no gold attribute for this evaluator, or an invalid one.
    problem: GoldProblem | None = None

    @property
    def text(self) -> str | None:
        """The gold answer as results publish it (``"true"``/``"false"`` or the class)."""
        if self.value is None:
            return None
        return str(self.value).lower() if isinstance(self.value, bool) else self.value


def read_gold(attributes: Mapping[str, str], evaluator: str, *, is_label: bool,
              labels: tuple[str, ...]) -> CanaryGold:
    """The gold answer a canary gives for ``evaluator`` (its name in results).

    Args:
        attributes: The canary's attributes.
        evaluator: The evaluator's name (``evalstream.gold.<evaluator>`` is read).
        is_label: A label evaluator: gold is a class, else ``true``/``false``.
        labels: The label evaluator's closed label set (empty: any short label).
    """
    raw = attributes.get(GOLD_ATTRIBUTE_PREFIX + evaluator)
    if raw is None:
        return CanaryGold(None, "no_gold")
    return parse_gold(raw, is_label=is_label, labels=labels)


def parse_gold(raw: str, *, is_label: bool, labels: tuple[str, ...] = ()) -> CanaryGold:
    """A gold answer as given (a canary's attribute, a human label) read for an evaluator:
    ``"true"``/``"false"`` (any case) for a binary one, a short class (of ``labels`` when
    that is not empty) for a label one; else ``invalid_gold``."""
    value = raw.strip()
    if not is_label:
        binary = _BINARY.get(value.lower())
        return CanaryGold(None, "invalid_gold") if binary is None else CanaryGold(binary)
    if not value or len(value) > MAX_GOLD_CHARS or (labels and value not in labels):
        return CanaryGold(None, "invalid_gold")
    return CanaryGold(value)


def parse_result_gold(raw: str, probabilities: Mapping[str, float], *,
                      is_label: bool) -> CanaryGold:
    """:func:`parse_gold` of a gold label given for one result (a human label, an ``eval``
    item's): a label evaluator's class must be one of that result's label set, which its
    ``probabilities`` cover whole (the set it was made with; an error result has none and
    then takes any short class). Unchecked, a typo counted as a disagreement with a Brier
    score above 1."""
    return parse_gold(raw, is_label=is_label, labels=tuple(probabilities) if is_label else ())


class Series(NamedTuple):
    """The counters one kind of gold answer is counted in (canaries, human labels)."""

    evaluations: Counter
    brier: Counter
    bin_results: Counter
    bin_confidence: Counter
    bin_correct: Counter

    @classmethod
    def canaries(cls, m: Metrics) -> Series:
        """``evalstream_canary_*``."""
        return cls(m.canary_evaluations, m.canary_brier, m.canary_bin_results,
                   m.canary_bin_confidence, m.canary_bin_correct)

    @classmethod
    def human_labels(cls, m: Metrics) -> Series:
        """``evalstream_labels_*`` (``evalstream join-labels``)."""
        return cls(m.labels_evaluations, m.labels_brier, m.labels_bin_results,
                   m.labels_bin_confidence, m.labels_bin_correct)


class Calibration:
    """Counts results compared with gold answers into ``evalstream_canary_*`` (or the
    ``series`` given: human labels use the same sums under ``evalstream_labels_*``).

    Canaries are few, so metric children are looked up per result rather than bound ahead.
    Label values are the route, the evaluator's name and its configured judge's name, all
    from the configuration.
    """

    def __init__(self, metrics: Metrics, series: Series | None = None) -> None:
        self._m = metrics
        self._s = series if series is not None else Series.canaries(metrics)

    def record(self, route: str, evaluator: str, judge: str, gold: CanaryGold,
               result: Forecast) -> Comparison | None:
        """Count one durable result with its gold answer; returns its comparison, if any."""
        m = self._s
        labels = (route, evaluator, judge)
        comparison = None
        if result.status == "error":
            outcome = "error"
        elif gold.value is None:
            outcome = gold.problem or "no_gold"
        else:
            comparison = compare(result, gold.value)
            if comparison is None:
                outcome = "unscored"
            else:
                outcome = "agreed" if comparison.correct else "disagreed"
                b = BIN_LABELS[confidence_bin(comparison.confidence)]
                m.brier.labels(*labels).inc(comparison.brier)
                # All three per bin, even at 0: ECE subtracts them bin by bin in PromQL,
                # where a missing series would drop the bin.
                m.bin_results.labels(*labels, b).inc()
                m.bin_confidence.labels(*labels, b).inc(comparison.confidence)
                m.bin_correct.labels(*labels, b).inc(int(comparison.correct))
        m.evaluations.labels(*labels, outcome).inc()
        return comparison

    def skipped(self, route: str, evaluator: str, judge: str) -> None:
        """The evaluator skipped a canary (it lacked what the evaluator needs)."""
        self._s.evaluations.labels(route, evaluator, judge, "skipped").inc()

    def ignored(self, reason: str, n: int = 1) -> None:
        """Canary markings not used (``unknown_evaluator``, ``not_canary``,
        ``invalid_marker``)."""
        self._m.canary_gold_ignored.labels(reason).inc(n)
