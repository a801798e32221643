"""The fields of a result, built from an event, its planned evaluation and a score (pure).

``Pipeline`` builds every result here: an ok result from a score, and an error result in
its place when an evaluation fails, or when the broker refuses a result for good (the error
result then stands in for it, so it must be small whatever the event holds).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from evalstream.app.bindings import Planned
from evalstream.evaluators.base import Score
from evalstream.events import EvalResult, JudgeInfo, TraceEvent

__all__ = ["error_result", "ok_result", "widest_error_input"]

_MAX_ERROR_CHARS = 500
#: Each copied event attribute is clipped to this: attributes are slicing keys (model,
#: tenant), and a huge one must not make results, or the error result that replaces a
#: refused one, too large for the broker (which would stop the worker on every restart).
_MAX_ATTRIBUTE_CHARS = 256
#: An error result clips the event's ids, session and app to this (see ``error_result``).
_MAX_ID_CHARS = 1_024
_CLIPPED_IN_ERRORS = ("event_id", "trace_id", "span_id", "session_id", "app")


def _envelope(event: TraceEvent, planned: Planned, names: tuple[str, ...]) -> dict[str, Any]:
    """The fields every result of ``planned`` on ``event`` carries, ok or error, with the
    event attributes ``names`` (``results.attributes``) copied."""
    bound = planned.bound
    attributes = event.attributes
    fields = {
        "result_id": bound.result_id(event.event_id),
        "event_id": event.event_id,
        "trace_id": event.trace_id,
        "span_id": event.span_id,
        "session_id": event.session_id,
        "app": event.app,
        "attributes": {n: attributes[n][:_MAX_ATTRIBUTE_CHARS] for n in names
                       if n in attributes} if names else {},
        "route": bound.route,
        "evaluator": bound.label,
        "evaluator_version": bound.version,
        "sample_rate": planned.sample_rate,
        "event_time": event.timestamp,
    }
    if planned.canary is not None:
        fields["canary"] = True
        fields["gold"] = planned.canary.text
    return fields


def ok_result(event: TraceEvent, planned: Planned, score: Score,
              names: tuple[str, ...]) -> EvalResult:
    """The result of ``planned`` on ``event`` scored ``score`` (validated: a score out of
    range raises pydantic's ``ValidationError``)."""
    # One dict validated once (``model_validate``, not ``EvalResult(**fields)``): the
    # same checks, without re-packing the fields as keyword arguments on the hot path.
    fields = _envelope(event, planned, names)
    fields["score"] = score.score
    fields["label"] = score.label
    fields["passed"] = score.passed
    fields["threshold"] = score.threshold
    fields["confidence"] = score.confidence
    fields["probabilities"] = score.probabilities
    fields["raw_score"] = score.raw_score
    fields["details"] = score.details
    fields["reason"] = score.reason
    fields["judge"] = score.judge
    return EvalResult.model_validate(fields)


def error_result(event: TraceEvent, planned: Planned, error: str, names: tuple[str, ...],
                 judge: JudgeInfo | None = None) -> EvalResult:
    """The error result of ``planned`` on ``event``.

    ``judge`` is the judge that failed (or answered with a score that could not be used)
    and what that cost; None where no judge was involved, as for the error results
    standing in for refused ones (:func:`widest_error_input` bounds those).
    """
    fields = _envelope(event, planned, names)
    # It stands in for a result the broker refused as too large, so it must be small
    # whatever the event holds: refused too, it would stop the worker on every restart.
    for name in _CLIPPED_IN_ERRORS:
        value = fields[name]
        if value is not None and len(value) > _MAX_ID_CHARS:
            fields[name] = value[:_MAX_ID_CHARS]
    return EvalResult(**fields, status="error", error=error[:_MAX_ERROR_CHARS], judge=judge)


def widest_error_input(names: tuple[str, ...]) -> tuple[TraceEvent, str]:
    """The event and error text that make :func:`error_result`'s output largest.

    Every clipped field (ids, session, app, the attributes ``names``, error) at its limit,
    of the character JSON writes longest (a control character: 6 bytes as ``\\u0000``),
    and the latest time stamp.
    """
    widest = "\x00"
    ids = widest * _MAX_ID_CHARS
    event = TraceEvent(
        event_id=ids, trace_id=ids, span_id=ids, session_id=ids, app=ids,
        attributes=dict.fromkeys(names, widest * _MAX_ATTRIBUTE_CHARS),
        timestamp=datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC))
    return event, widest * _MAX_ERROR_CHARS
