"""Building an ``EvalResult`` without validating it again, when that changes nothing.

``EvalResult.model_validate`` was ~10% of the worker's CPU per evaluated event (py-spy of
the real worker under bench/evaluate_path.py), spent re-checking values the pipeline had
just produced. When every value already has exactly the type and range validation would
store unchanged, the instance is built as pydantic's ``model_construct`` builds one (the
documented way to skip validation; its own Python loop over the fields costs more than
validating, ~40 us against ~9 us, so it is not called). Anything else (an int score, a NaN,
a subclass from a plugin) is left to validation, as before.
"""

from __future__ import annotations

from typing import Any

from evalstream.evaluators.base import Score
from evalstream.events import EvalResult, JudgeInfo

__all__ = ["TRUSTED_KEYS", "TRUSTED_KEYS_CURRENT", "trusted_result", "trusted_score"]

#: The keys ``Pipeline._result`` writes, in EvalResult's declaration order (the order its
#: JSON is written in). Should a field be added to EvalResult and not here, results are
#: validated again (correct, only slower) and tests/unit/test_result_build.py fails.
TRUSTED_KEYS = (
    "schema_version", "result_id", "event_id", "trace_id", "span_id", "session_id", "app",
    "attributes", "route", "evaluator", "score", "label", "passed", "threshold", "confidence",
    "probabilities", "raw_score", "details", "reason", "status", "error", "judge",
    "sample_rate", "event_time", "evaluated_at",
)
TRUSTED_KEYS_CURRENT = tuple(EvalResult.model_fields) == TRUSTED_KEYS
#: The keys ``model_validate`` gets on the validated path: what it marks as set.
_FIELDS_SET = frozenset(EvalResult.model_fields) - {"schema_version", "status", "error",
                                                    "evaluated_at"}
_set_attribute = object.__setattr__


def trusted_result(values: dict[str, Any]) -> EvalResult:
    """An ``EvalResult`` of already-valid ``values`` (every field, in declaration order)."""
    result = EvalResult.__new__(EvalResult)
    _set_attribute(result, "__dict__", values)
    _set_attribute(result, "__pydantic_fields_set__", set(_FIELDS_SET))
    _set_attribute(result, "__pydantic_extra__", None)
    _set_attribute(result, "__pydantic_private__", None)
    return result


def trusted_score(score: Score) -> bool:
    """Whether every field of ``score`` is what ``EvalResult`` validation keeps as it is:
    exactly a float (in 0..1 for ``score`` and ``confidence``; an int, a NaN or a subclass
    is left to validation), str, bool or ``JudgeInfo``, or None; plain dicts with str keys
    (and float values, for ``probabilities``). Written out flat: this runs per result."""
    value, confidence = score.score, score.confidence
    label, passed, threshold = score.label, score.passed, score.threshold
    raw, reason, judge = score.raw_score, score.reason, score.judge
    if not ((value is None or (type(value) is float and 0.0 <= value <= 1.0))
            and (confidence is None or (type(confidence) is float and 0.0 <= confidence <= 1.0))
            and (label is None or type(label) is str)
            and (passed is None or type(passed) is bool)
            and (threshold is None or type(threshold) is float)
            and (raw is None or type(raw) is float)
            and (reason is None or type(reason) is str)
            and (judge is None or type(judge) is JudgeInfo)):
        return False
    probabilities, details = score.probabilities, score.details
    if type(probabilities) is not dict or type(details) is not dict:
        return False
    for key, p in probabilities.items():
        if type(key) is not str or type(p) is not float:
            return False
    return all(type(key) is str for key in details)
