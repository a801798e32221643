"""The summary of an offline run: pass rates (weighted by 1/sample_rate) with Wilson intervals,
and agreement with gold.

Pure: it accumulates results (and gold labels where the input carried them) per
(route, evaluator) and renders a table. For binary evaluators the gold label is "passed"
(``true`` = the desirable outcome) and the forecast is ``score`` = p(good outcome); for label
evaluators the gold label is a class and the forecast is the ``probabilities`` mapping.
The comparison itself is ``app/calibration.py``'s, which the worker's canaries use too, so
the live and offline figures agree on the same inputs.

What the judges cost is summed from each result's ``judge`` (``JudgeInfo``: requests, tokens,
USD at the configured prices), so it is exact per (route, evaluator) and needs no metrics:
``JudgeSpend`` (``app/offline_spend.py``, re-exported here). Those columns appear only when
some judge made requests (a run on the builtin judge alone gets one "no judge requests" line
instead of columns of zeros), and the USD ones only when some judge was priced.

Each figure is computed once, as a number (:meth:`EvaluatorSummary.figures`,
:meth:`JudgeSpend.per_evaluation`); the table, the Markdown and the JSON summary
(``app/offline_json.py``) only format them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from evalstream.app.calibration import ECE_BINS, compare, confidence_bin
from evalstream.app.offline_spend import JudgeSpend, PerEvaluation, usd
from evalstream.drift.stats import weighted_share
from evalstream.events import EvalResult

__all__ = ["ECE_BINS", "OUTCOMES", "EvaluatorSummary", "Figures", "GoldFigures", "JudgeSpend",
           "PassRate", "PerEvaluation", "Summary", "expected_calibration_error", "macro_f1",
           "usd"]

#: A result's outcome, as the worker counts it (``Pipeline.record``): ``error``, else
#: ``labelled`` when it has no verdict, else ``passed`` or ``failed``.
OUTCOMES = ("passed", "failed", "labelled", "error")


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


@dataclass(frozen=True, slots=True)
class PassRate:
    """A pass rate (weighted by 1/sample_rate) and its 95% Wilson interval."""

    rate: float
    low: float
    high: float


@dataclass(frozen=True, slots=True)
class GoldFigures:
    """Agreement of the results with the gold labels of ``n`` items."""

    n: int
    accuracy: float
    macro_f1: float
    brier: float
    ece: float


@dataclass(frozen=True, slots=True)
class Figures:
    """An :class:`EvaluatorSummary`'s statistics, each None when nothing gives it: the one
    computation the table, Markdown and JSON summaries all print."""

    pass_rate: PassRate | None
    mean_score: float | None
    gold: GoldFigures | None


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
    #: of passing weights and their squares), and the scored ones (weights, weighted
    #: scores): a route's ``strata`` mix results sampled at different rates in one (route,
    #: evaluator), and the share of the results alone over-represents the strata sampled
    #: most.
    weight: float = 0.0
    weight2: float = 0.0
    weight_passed: float = 0.0
    weight2_passed: float = 0.0
    score_weight: float = 0.0
    score_weighted: float = 0.0
    #: Per gold-labelled item: gold and predicted label, Brier term, confidence in the
    #: prediction (for calibration) and whether it was right.
    gold: list[str] = field(default_factory=list)
    predicted: list[str] = field(default_factory=list)
    brier: list[float] = field(default_factory=list)
    confidence: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)
    #: What its judge cost, over its ok and error results.
    spend: JudgeSpend = field(default_factory=JudgeSpend)
    #: Results by outcome (:data:`OUTCOMES`), unweighted.
    outcomes: Counter[str] = field(default_factory=Counter)
    #: The ok results' ``label`` values, unweighted (binary evaluators give one too, e.g.
    #: ``refused``).
    labels: Counter[str] = field(default_factory=Counter)
    #: Canary results (``canary: true``): kept out of every count above but ``spend`` and
    #: the gold comparison, as the worker keeps them out of pass rates.
    canaries: int = 0

    def add(self, result: EvalResult, gold: bool | str | None) -> None:
        """Count ``result``; compare it with ``gold`` when there is one."""
        self.spend.add(result)
        if result.canary:
            self.canaries += 1
            if result.status == "ok" and gold is not None:
                self._compare(result, gold)
            return
        if result.status == "error":
            self.errors += 1
            self.outcomes["error"] += 1
            return
        self.n += 1
        passed = result.passed
        self.outcomes["labelled" if passed is None else "passed" if passed else "failed"] += 1
        if result.label is not None:
            self.labels[result.label] += 1
        weight = 1.0 / result.sample_rate
        if result.passed is not None:
            self.graded += 1
            self.weight += weight
            self.weight2 += weight * weight
            if result.passed:
                self.weight_passed += weight
                self.weight2_passed += weight * weight
        if result.score is not None:
            self.scored += 1
            self.score_weight += weight
            self.score_weighted += weight * result.score
        if gold is not None:
            self._compare(result, gold)

    def _compare(self, result: EvalResult, gold: bool | str) -> None:
        comparison = compare(result, gold)
        if comparison is not None:
            self.gold.append(comparison.gold)
            self.predicted.append(comparison.predicted)
            self.brier.append(comparison.brier)
            self.confidence.append(comparison.confidence)
            self.correct.append(comparison.correct)

    def figures(self) -> Figures:
        """The pass rate, mean score and gold agreement of the results so far."""
        pass_rate = None
        if self.graded:
            # Weighted as the worker's live pass rates (drift/stats.py): unbiased over
            # strata sampled at different rates, the interval on the smaller of Kish's and
            # the linearised effective sample size (``interval_n``). With one rate, the
            # plain share over ``graded`` results.
            pass_rate = PassRate(*weighted_share(self.weight_passed, self.weight,
                                                 self.weight2_passed, self.weight2))
        mean_score = self.score_weighted / self.score_weight if self.scored else None
        gold = None
        if self.gold:
            k = len(self.gold)
            gold = GoldFigures(k, sum(self.correct) / k, macro_f1(self.gold, self.predicted),
                               sum(self.brier) / k,
                               expected_calibration_error(self.confidence, self.correct))
        return Figures(pass_rate, mean_score, gold)

    def row(self) -> dict[str, str]:
        """The printable figures."""
        figures = self.figures()
        row = {"route": self.route, "evaluator": self.evaluator, "n": str(self.n),
               "errors": str(self.errors), "pass rate (95% CI)": "-", "mean score": "-",
               "gold n": "-", "accuracy": "-", "macro-F1": "-", "Brier": "-", "ECE": "-"}
        if (rate := figures.pass_rate) is not None:
            row["pass rate (95% CI)"] = f"{rate.rate:.3f} [{rate.low:.3f}, {rate.high:.3f}]"
        if figures.mean_score is not None:
            row["mean score"] = f"{figures.mean_score:.3f}"
        if (gold := figures.gold) is not None:
            row.update({"gold n": str(gold.n), "accuracy": f"{gold.accuracy:.3f}",
                        "macro-F1": f"{gold.macro_f1:.3f}", "Brier": f"{gold.brier:.3f}",
                        "ECE": f"{gold.ece:.3f}"})
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
    #: Items' gold labels left out of the comparison: not ``true``/``false`` for a binary
    #: evaluator (``"yes"``, ``1``), or not a class for a label one.
    invalid_gold: int = 0
    #: What the judges metered over the run (``evalstream_judge_tokens_total`` and
    #: ``evalstream_judge_cost_usd_total``, all judges): the results carry what their own
    #: evaluations spent, error results what their failed evaluation did (earlier calls
    #: included), so this is more only when a call's spend is in no result: a plugin
    #: evaluator that fails with an error other than a ``JudgeError`` (which names no
    #: judge) on an answer it could not use, or a bug after a paid call.
    metered_tokens: int = 0
    metered_cost_usd: float = 0.0

    def add(self, result: EvalResult, gold: bool | str | None) -> None:
        """Count one result."""
        key = (result.route, result.evaluator)
        summary = self.by_key.get(key)
        if summary is None:
            summary = self.by_key[key] = EvaluatorSummary(result.route, result.evaluator)
        summary.add(result, gold)

    def spend(self) -> JudgeSpend:
        """What the judges cost over every (route, evaluator)."""
        total = JudgeSpend()
        for summary in self.by_key.values():
            total.merge(summary.spend)
        return total

    def rows(self) -> list[dict[str, str]]:
        """One row per (route, evaluator), sorted; with judge cost columns when some judge
        made requests (USD ones when some judge was priced)."""
        total = self.spend()
        judged, priced = total.requests > 0, total.cost_usd > 0
        rows = []
        # A canaries column only where the input held canaries: most inputs hold none.
        canaries = any(s.canaries for s in self.by_key.values())
        for key in sorted(self.by_key):
            summary = self.by_key[key]
            row = summary.row()
            if canaries:
                row["canaries"] = str(summary.canaries)
            if judged:
                row.update(summary.spend.columns(priced))
            rows.append(row)
        return rows

    def spend_line(self) -> str:
        """The judges' total cost, or that no judge made a request (builtin judge only)."""
        total = self.spend()
        if total.builtin_only and not self.metered_tokens:
            return ("judge cost: none (builtin judge only: it runs in-process, no requests)"
                    if total.backends else "judge cost: none (no judge was asked)")
        priced = total.cost_usd > 0 or self.metered_cost_usd > 0
        text = total.line(priced)
        tokens = total.tokens_in + total.tokens_out
        # Summed in another order: the same spend may differ in the last bits.
        if (self.metered_tokens > tokens
                or self.metered_cost_usd > total.cost_usd * (1 + 1e-9) + 1e-12):
            text += (f"; the judges metered {self.metered_tokens} tokens"
                     + (f", USD {usd(self.metered_cost_usd)}" if priced else "")
                     + " in all: the rest is in no result (e.g. a judge answer an evaluator "
                     "could not use)")
        return text

    def markdown(self) -> str:
        """The table as GitHub-flavoured Markdown."""
        rows = self.rows()
        if not rows:
            return "(no results)\n"
        head = list(rows[0])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r[h] for h in head) + " |" for r in rows]
        return "\n".join(lines) + "\n\n" + self.spend_line() + "\n"
