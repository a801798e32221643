"""What the judges of an offline run cost: :class:`JudgeSpend`, summed from the results.

Each result's ``judge`` (``JudgeInfo``) says what its evaluation spent: requests, tokens and
USD at the configured prices (an error result, what its failed evaluation did). Summed per
(route, evaluator) it is exact and needs no metrics. Pure, as ``app/offline_report.py``
which prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalstream.events import EvalResult

__all__ = ["JudgeSpend", "PerEvaluation", "usd"]


def usd(amount: float) -> str:
    """``amount`` of USD to six significant digits: ``0.0202``, ``20.2``, ``1234.57``.

    Judge prices are fractions of a cent per call, so a fixed two decimals would print most
    costs as 0.00; six digits hide the float noise of summing them (0.020200000000000003).
    """
    return f"{amount:.6g}"


@dataclass(frozen=True, slots=True)
class PerEvaluation:
    """A :class:`JudgeSpend` divided by its evaluations."""

    requests: float
    tokens_in: float
    tokens_out: float
    cost_usd: float


@dataclass(slots=True)
class JudgeSpend:
    """What the judges of some evaluations cost, summed from their results' ``JudgeInfo``."""

    #: Evaluations (results, ok or error) the figures are divided by.
    evaluations: int = 0
    requests: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    #: Results answered from a judge's cache (they cost nothing).
    cached: int = 0
    #: The judges' backends seen in results (``"builtin"``, ``"openai"``).
    backends: set[str] = field(default_factory=set)

    def add(self, result: EvalResult) -> None:
        """Count one result and what its judge spent on it (nothing when it has no judge)."""
        self.evaluations += 1
        judge = result.judge
        if judge is None:
            return
        self.requests += judge.requests
        self.tokens_in += judge.tokens_in
        self.tokens_out += judge.tokens_out
        self.cost_usd += judge.cost_usd
        self.cached += judge.cached
        self.backends.add(judge.backend)

    def merge(self, other: JudgeSpend) -> None:
        """Add ``other``'s figures to these (the total over evaluators)."""
        self.evaluations += other.evaluations
        self.requests += other.requests
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out
        self.cost_usd += other.cost_usd
        self.cached += other.cached
        self.backends |= other.backends

    def per_evaluation(self) -> PerEvaluation | None:
        """The figures per evaluation; None when there was none."""
        e = self.evaluations
        if not e:
            return None
        return PerEvaluation(self.requests / e, self.tokens_in / e, self.tokens_out / e,
                             self.cost_usd / e)

    @property
    def builtin_only(self) -> bool:
        """No judge request, and no judge but the builtin one (or none) was asked."""
        return not self.requests and self.backends <= {"builtin"}

    def columns(self, priced: bool) -> dict[str, str]:
        """Per evaluation: judge requests, tokens in and out; with ``priced``, USD in all
        and per 1,000 evaluations. ``-`` when there were no evaluations, and for the
        builtin judge (``builtin``, then ``-``)."""
        if self.builtin_only:
            # An evaluator on the builtin judge beside a priced one: its row says why it
            # costs nothing rather than showing a run of zeros.
            row = dict.fromkeys(("judge req/eval", "tokens in/eval", "tokens out/eval"), "-")
            row["judge req/eval"] = "builtin" if self.backends else "-"
            if priced:
                row.update({"cost USD": "-", "USD/1k evals": "-"})
            return row
        per = self.per_evaluation()
        row = {"judge req/eval": f"{per.requests:.2f}" if per else "-",
               "tokens in/eval": f"{per.tokens_in:.1f}" if per else "-",
               "tokens out/eval": f"{per.tokens_out:.1f}" if per else "-"}
        if priced:
            row["cost USD"] = usd(self.cost_usd)
            row["USD/1k evals"] = usd(per.cost_usd * 1000) if per else "-"
        return row

    def line(self, priced: bool) -> str:
        """The figures as one sentence (the total line under the table)."""
        per = self.per_evaluation()
        text = (f"judge total: {self.requests} requests, {self.tokens_in} tokens in, "
                f"{self.tokens_out} out over {self.evaluations} evaluations")
        if per:
            text += (f" ({per.requests:.2f} requests, "
                     f"{per.tokens_in + per.tokens_out:.1f} tokens per evaluation)")
        if priced:
            text += f"; cost USD {usd(self.cost_usd)}"
            if per:
                text += f" (USD {usd(per.cost_usd * 1000)} per 1,000 evaluations)"
        if self.cached:
            text += f"; {self.cached} answered from the judge cache at no cost"
        return text
