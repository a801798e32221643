"""``evalstream eval --json``: the summary as one JSON document, for CI gates and notebooks.

The figures are the table's own (:meth:`EvaluatorSummary.figures`,
:meth:`JudgeSpend.per_evaluation`), as numbers rather than text; a figure nothing gives is
``null``. No trace content: route and evaluator names, outcome and label counts, skip
reasons and numbers only. The keys are stable; ``version`` changes only when one is removed
or changes meaning (new keys may be added)::

    {
      "version": 1,
      "items": 120,                 # items read (evaldata items or decoded trace events)
      "without_results": 3,         # items no evaluator gave a result for
      "skipped": {"sampling": 3},   # why, by reason, as evalstream_events_skipped_total
      "bad_lines": 0,               # input lines skipped as unreadable
      "invalid_gold": 0,            # items' gold labels the evaluator cannot be compared with
      "no_sampling": false,         # whether --no-sampling was given
      "evaluators": [               # one per (route, evaluator), sorted by both
        {
          "route": "support", "evaluator": "refusal",
          "n": 116, "errors": 1,    # ok results, error results (the table's n, errors)
          "canaries": 0,            # canary results: in "gold" and "judge" only
          "outcomes": {"passed": 90, "failed": 26, "labelled": 0, "error": 1},
          "labels": {"not_refused": 90, "refused": 26},   # ok results' label values
          "pass_rate": {"rate": 0.776, "low": 0.69, "high": 0.84} | null,
          "mean_score": 0.71 | null,
          "gold": {"n": 116, "accuracy": .., "macro_f1": .., "brier": .., "ece": ..} | null,
          "judge": {<spend>}
        }
      ],
      "judge_total": {<spend>, "metered_tokens": 0, "metered_cost_usd": 0.0}
    }

``pass_rate`` and ``mean_score`` are weighted by 1/sample_rate, as in the table (with one
rate, or ``--no-sampling``, the plain share); ``low``/``high`` bound the 95% Wilson
interval. A ``<spend>`` is ``{"evaluations", "requests", "tokens_in", "tokens_out",
"cost_usd", "cached", "backends": [...], "per_evaluation": {"requests", "tokens_in",
"tokens_out", "cost_usd"} | null}``: totals over the evaluations (ok and error results) and
the same divided by their number. ``metered_*`` are what the judges' metrics counted over
the run, more than the results carry only when a judge answer was not usable.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from evalstream.app.offline_report import OUTCOMES, EvaluatorSummary, JudgeSpend, Summary

__all__ = ["VERSION", "summary_document", "summary_json"]

#: The document's ``version``.
VERSION = 1


def _spend(spend: JudgeSpend) -> dict[str, Any]:
    per = spend.per_evaluation()
    return {"evaluations": spend.evaluations, "requests": spend.requests,
            "tokens_in": spend.tokens_in, "tokens_out": spend.tokens_out,
            "cost_usd": spend.cost_usd, "cached": spend.cached,
            "backends": sorted(spend.backends),
            "per_evaluation": asdict(per) if per is not None else None}


def _evaluator(summary: EvaluatorSummary) -> dict[str, Any]:
    figures = summary.figures()
    return {
        "route": summary.route, "evaluator": summary.evaluator,
        "n": summary.n, "errors": summary.errors, "canaries": summary.canaries,
        "outcomes": {outcome: summary.outcomes[outcome] for outcome in OUTCOMES},
        "labels": dict(sorted(summary.labels.items())),
        "pass_rate": asdict(figures.pass_rate) if figures.pass_rate is not None else None,
        "mean_score": figures.mean_score,
        "gold": asdict(figures.gold) if figures.gold is not None else None,
        "judge": _spend(summary.spend),
    }


def summary_document(summary: Summary, *, no_sampling: bool = False) -> dict[str, Any]:
    """The summary as plain data (the keys in this module's docstring)."""
    return {
        "version": VERSION,
        "items": summary.items,
        "without_results": summary.without_results,
        "skipped": dict(sorted(summary.skipped.items())),
        "bad_lines": summary.bad_lines,
        "invalid_gold": summary.invalid_gold,
        "no_sampling": no_sampling,
        "evaluators": [_evaluator(summary.by_key[key]) for key in sorted(summary.by_key)],
        "judge_total": {**_spend(summary.spend()), "metered_tokens": summary.metered_tokens,
                        "metered_cost_usd": summary.metered_cost_usd},
    }


def summary_json(summary: Summary, *, no_sampling: bool = False) -> str:
    """:func:`summary_document` as indented JSON text.

    Raises:
        ValueError: a figure is not finite (a bug: none can be); JSON has no NaN, and a
            document a parser rejects would fail a CI gate for the wrong reason.
    """
    return json.dumps(summary_document(summary, no_sampling=no_sampling), indent=2,
                      ensure_ascii=False, allow_nan=False)
