"""The fields of a result, built from an event, its planned evaluation and a score (pure).

``Pipeline`` builds every result here: an ok result from a score, and an error result in
its place when an evaluation fails, or when the broker refuses a result for good (the error
result then stands in for it, carrying the refused result's judge spend, so it must be small
whatever the event and the judge's info hold).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args

from evalstream.app.bindings import Planned
from evalstream.evaluators.base import Score
from evalstream.events import EvalResult, JudgeInfo, ProbabilitySource, TraceEvent

__all__ = ["error_result", "ok_result", "widest_error_input"]

_MAX_ERROR_CHARS = 500
#: Each copied event attribute is clipped to this: attributes are slicing keys (model,
#: tenant), and a huge one must not make results, or the error result that replaces a
#: refused one, too large for the broker (which would stop the worker on every restart).
_MAX_ATTRIBUTE_CHARS = 256
#: An error result clips the event's ids, session and app to this (see ``error_result``).
_MAX_ID_CHARS = 1_024
_CLIPPED_IN_ERRORS = ("event_id", "trace_id", "span_id", "session_id", "app")
#: An error result clips its judge's backend and model names to this (a plugin judge names
#: itself), and keeps its counts within 64 bits, so the judge spend a stand-in carries
#: cannot make it too large. Its floats need no bound: JSON writes any in 24 characters.
_MAX_JUDGE_NAME_CHARS = 256
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_JUDGE_NAMES = ("backend", "model")
_JUDGE_COUNTS = ("requests", "tokens_in", "tokens_out")


def _utc(stamp: datetime | None) -> datetime | None:
    """``stamp`` in UTC: an event time without an offset is UTC (as the lag metric and
    session ordering read it), one with another offset the same instant. Written as it
    came, ``...T21:05:00`` is no RFC 3339 date-time (the schema's format) and leaves its zone
    to a reader's guess, and ``+02:00`` sat beside ``evaluated_at``'s ``Z``."""
    if stamp is None or stamp.tzinfo is UTC:
        return stamp
    if stamp.tzinfo is None:
        return stamp.replace(tzinfo=UTC)
    return stamp.astimezone(UTC)


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
        "event_time": _utc(event.timestamp),
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


def _bounded_judge(judge: JudgeInfo) -> JudgeInfo:
    """``judge`` as an error result carries it: names clipped, counts within 64 bits (the
    same object when nothing needed it, as always in practice)."""
    update: dict[str, Any] = {}
    for name in _JUDGE_NAMES:
        value = getattr(judge, name)
        if value is not None and len(value) > _MAX_JUDGE_NAME_CHARS:
            update[name] = value[:_MAX_JUDGE_NAME_CHARS]
    for name in _JUDGE_COUNTS:
        value = getattr(judge, name)
        if not _INT64_MIN <= value <= _INT64_MAX:
            update[name] = min(max(value, _INT64_MIN), _INT64_MAX)
    return judge.model_copy(update=update) if update else judge


def error_result(event: TraceEvent, planned: Planned, error: str, names: tuple[str, ...],
                 judge: JudgeInfo | None = None) -> EvalResult:
    """The error result of ``planned`` on ``event``.

    ``judge`` is the judge that failed (or answered with a score that could not be used)
    and what that cost; for an error result standing in for a refused one, the refused
    result's judge and spend (which no other result carries). None where no judge was
    involved. Its names are clipped and its counts bounded, as the event's fields are
    (:func:`widest_error_input` bounds the whole).
    """
    fields = _envelope(event, planned, names)
    # It stands in for a result the broker refused as too large, so it must be small
    # whatever the event holds: refused too, it would stop the worker on every restart.
    for name in _CLIPPED_IN_ERRORS:
        value = fields[name]
        if value is not None and len(value) > _MAX_ID_CHARS:
            fields[name] = value[:_MAX_ID_CHARS]
    return EvalResult(**fields, status="error", error=error[:_MAX_ERROR_CHARS],
                      judge=None if judge is None else _bounded_judge(judge))


def widest_error_input(names: tuple[str, ...]) -> tuple[TraceEvent, str, JudgeInfo]:
    """The event, error text and judge info that make :func:`error_result`'s output
    largest.

    Every clipped field (ids, session, app, the attributes ``names``, error, the judge's
    names) at its limit, of the character JSON writes longest (a control character: 6
    bytes as ``\\u0000``); the judge's counts at the longest 64-bit number, its floats at a
    24-character one (the most JSON writes for any), its flags ``false``, its
    ``probabilities_from`` the longest it can say; and the latest time stamp.
    """
    widest = "\x00"
    ids = widest * _MAX_ID_CHARS
    event = TraceEvent(
        event_id=ids, trace_id=ids, span_id=ids, session_id=ids, app=ids,
        attributes=dict.fromkeys(names, widest * _MAX_ATTRIBUTE_CHARS),
        timestamp=datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC))
    name = widest * _MAX_JUDGE_NAME_CHARS
    longest_float = -2.2250738585072014e-308
    judge = JudgeInfo(backend=name, model=name, latency_ms=longest_float,
                      requests=_INT64_MIN, tokens_in=_INT64_MIN, tokens_out=_INT64_MIN,
                      cost_usd=longest_float,
                      probabilities_from=max(get_args(ProbabilitySource), key=len))
    return event, widest * _MAX_ERROR_CHARS, judge
