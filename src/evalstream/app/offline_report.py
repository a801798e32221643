"""The summary of an offline run: pass rates (weighted by 1/sample_rate) with Wilson intervals,
and agreement with gold.

Pure: it accumulates results (and gold labels where the input carried them) per
(route, evaluator) and renders a table. For binary evaluators the gold label is "passed"
(``true`` = the desirable outcome) and the forecast is ``score`` = p(good outcome); for label
evaluators the gold label is a class and the forecast is the ``probabilities`` mapping.
The comparison itself is ``app/calibration.py``'s, which the worker's canaries use too, so
the live and offline figures agree on the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evalstream.app.calibration import ECE_BINS, compare, confidence_bin
from evalstream.drift.stats import weighted_share
from evalstream.events import EvalResult

__all__ = ["ECE_BINS", "EvaluatorSummary", "Summary", "expected_calibration_error",
           "macro_f1"]


def macro_f1(gold: Sequence[str], predicted: Sequence[str]) -> float:
    """The unweighted mean F1 over the classes present in ``gold`` or ``predicted``."""
    classes = sorted(set(gold) | set(predicted))
    scores = []
    for c in classes:
        tp = sum(1 for g, p in zip(gold, predicted, strict=True) if g == c and p == c)
        fp = sum(1 for g, p in zip(gold, predicted, strict=True) if g != c and p == c)
        fn = sum(1 for g, p in zip(gold, predicted, strict=True) if g == c and p != c)
        denominator = 2 * tp + fp + fn
        scores.append(2 * tp / denominator if denominator else 0.0)
    return sum(scores) / len(scores) if scores else 0.0


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool],
                               bins: int = ECE_BINS) -> float:
    """sum_b |B|/n x |accuracy(B) - mean confidence(B)| over equal-width confidence bins."""
    n = len(confidence)
    if n == 0:
        return 0.0
    totals = [0] * bins
    conf_sum = [0.0] * bins
    hits = [0] * bins
    for c, ok in zip(confidence, correct, strict=True):
        b = confidence_bin(c, bins)
        totals[b] += 1
        conf_sum[b] += c
        hits[b] += int(ok)
    return sum(abs(hits[b] / totals[b] - conf_sum[b] / totals[b]) * totals[b] / n
               for b in range(bins) if totals[b])


@dataclass(slots=True)
class EvaluatorSummary:
    """Counts and gold agreement for one (route, evaluator)."""

    route: str
    evaluator: str
    n: int = 0
    errors: int = 0
    graded: int = 0
    scored: int = 0
    #: The graded results weighted by 1/sample_rate (sum of weights, of squared weights,
    #: of passing weights), and the scored ones (weights, weighted scores): a route's
    #: ``strata`` mix results sampled at different rates in one (route, evaluator), and
    #: the share of the results alone over-represents the strata sampled most.
    weight: float = 0.0
    weight2: float = 0.0
    weight_passed: float = 0.0
    score_weight: float = 0.0
    score_weighted: float = 0.0
    #: Per gold-labelled item: gold and predicted label, Brier term, confidence in the
    #: prediction (for calibration) and whether it was right.
    gold: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    brier: list[float] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    def add(self, result: EvalResult, gold: bool | str | None) -> None:
        """Count ``result``; compare it with ``gold`` when there is one."""
        if result.status == "error":
            self.errors += 1
            return
        self.n += 1
        weight = 1.0 / result.sample_rate
        if result.passed is not None:
            self.graded += 1
            self.weight += weight
            self.weight2 += weight * weight
            self.weight_passed += weight * result.passed
        if result.score is not None:
            self.scored += 1
            self.score_weight += weight
            self.score_weighted += weight * result.score
        comparison = compare(result, gold) if gold is not None else None
        if comparison is not None:
            self.gold.append(comparison.gold)
            self.predicted.append(comparison.predicted)
            self.brier.append(comparison.brier)
            self.confidence.append(comparison.confidence)
            self.correct.append(comparison.correct)

    def row(self) -> dict[str, str]:
        """The printable figures."""
        row = {"route": self.route, "evaluator": self.evaluator, "n": str(self.n),
               "errors": str(self.errors), "pass rate (95% CI)": "-", "mean score": "-",
               "gold n": "-", "accuracy": "-", "macro-F1": "-", "Brier": "-", "ECE": "-"}
        if self.graded:
            # Weighted as the worker's live pass rates (drift/stats.py): unbiased over
            # strata sampled at different rates, the interval on Kish's effective sample
            # size. With one rate, the plain share over ``graded`` results.
            rate, low, high = weighted_share(self.weight_passed, self.weight, self.weight2)
            row["pass rate (95% CI)"] = f"{rate:.3f} [{low:.3f}, {high:.3f}]"
        if self.scored:
            row["mean score"] = f"{self.score_weighted / self.score_weight:.3f}"
        if self.gold:
            k = len(self.gold)
            row.update({
                "gold n": str(k),
                "accuracy": f"{sum(self.correct) / k:.3f}",
                "macro-F1": f"{macro_f1(self.gold, self.predicted):.3f}",
                "Brier": f"{sum(self.brier) / k:.3f}",
                "ECE": f"{expected_calibration_error(self.confidence, self.correct):.3f}",
            })
        return row


@dataclass(slots=True)
class Summary:
    """Per (route, evaluator) summaries plus the skip count."""

    by_key: dict[tuple[str, str], EvaluatorSummary] = field(default_factory=dict)
    items: int = 0
    without_results: int = 0
    #: Why events were not evaluated (sampling, no_route, an evaluator's skip reason), as
    #: the worker's ``evalstream_events_skipped_total`` counts them.
    skipped: dict[str, int] = field(default_factory=dict)
    #: Input lines skipped as unreadable (reported by file and line).
    bad_lines: int = 0

    def add(self, result: EvalResult, gold: bool | str | None) -> None:
        """Count one result."""
        key = (result.route, result.evaluator)
        summary = self.by_key.get(key)
        if summary is None:
            summary = self.by_key[key] = EvaluatorSummary(result.route, result.evaluator)
        summary.add(result, gold)

    def rows(self) -> list[dict[str, str]]:
        """One row per (route, evaluator), sorted."""
        return [self.by_key[k].row() for k in sorted(self.by_key)]

    def markdown(self) -> str:
        """The table as GitHub-flavoured Markdown."""
        rows = self.rows()
        if not rows:
            return "(no results)\n"
        head = list(rows[0])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]
        return "\n".join(lines) + "\n"
