"""A result's JSON written by orjson when that gives pydantic's bytes exactly (hot path).

``dump_json`` (pydantic's serializer) was ~8% of the worker's CPU per evaluated event
(py-spy of the real worker under bench/evaluate_path.py). orjson writes the same bytes for
what a result holds almost always: keys in the order of the instance's ``__dict__`` (the
field order), compact separators, shortest round-trip floats (the same digits and exponent
form as pydantic's for 900,000 random doubles), ``null`` for NaN and infinities, raw UTF-8
with the same escapes, and ISO 8601 times with ``Z`` for a zero offset. Where the two
differ, or might, the result goes to ``dump_json`` as before:

* ``details`` holding anything but str, int, float, bool or None (pydantic infers a form
  for arbitrary objects; orjson refuses some and writes others its own way);
* a time whose UTC offset has seconds (pydantic drops them, orjson rounds to the minute);
* a ``JudgeInfo`` field of an unexpected type (e.g. an int where a float is declared,
  possible after ``model_copy``, which pydantic writes as declared);
* anything orjson refuses (an int past 64 bits, a lone surrogate): the fallback then
  raises pydantic's own error, as before.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from evalstream.events import EvalResult, JudgeInfo, dump_json

__all__ = ["result_json"]

_OPTIONS = orjson.OPT_UTC_Z
_PLAIN = frozenset((str, int, float, bool, type(None)))
#: JudgeInfo's fields and the one type each holds once validated (None allowed for model).
_JUDGE_TYPES = (("backend", str), ("model", str), ("latency_ms", float), ("requests", int),
                ("tokens_in", int), ("tokens_out", int), ("cost_usd", float),
                ("cached", bool), ("escalated", bool))
#: Checked once: should JudgeInfo change, every result takes the pydantic path.
_JUDGE_FIELDS_KNOWN = tuple(JudgeInfo.model_fields) == tuple(n for n, _ in _JUDGE_TYPES)


def _minute_offset(value: Any) -> bool:
    """Whether ``value`` is None or a datetime whose UTC offset (if any) has no seconds."""
    if type(value) is not datetime:
        return value is None
    if value.tzinfo is UTC:  # ``evaluated_at`` always
        return True
    offset = value.utcoffset()
    return offset is None or not (offset.seconds % 60 or offset.microseconds)


#: The last JudgeInfo found plain, held (so its id cannot be reused): a judge that answers
#: with one shared, frozen info object (the builtin judge) is checked once.
_last_plain: list[JudgeInfo | None] = [None]


def _plain_judge(judge: Any) -> bool:
    if judge is _last_plain[0]:
        return True
    if type(judge) is not JudgeInfo or not _JUDGE_FIELDS_KNOWN:
        return False
    values = judge.__dict__
    for name, kind in _JUDGE_TYPES:
        value = values[name]
        if type(value) is not kind and not (value is None and name == "model"):
            return False
    _last_plain[0] = judge
    return True


def _judge_fields(value: Any) -> dict[str, Any]:
    """orjson's hook for what it cannot write itself: only the (checked) JudgeInfo."""
    if type(value) is JudgeInfo:
        return value.__dict__
    raise TypeError(type(value).__name__)


def result_json(result: EvalResult) -> bytes:
    """``dump_json(result)``, the same bytes, by orjson when that is known to agree.

    Raises:
        pydantic_core.PydanticSerializationError: as ``dump_json`` does, for a result
            JSON cannot hold.
    """
    values = result.__dict__
    judge = values.get("judge")
    if (type(result) is not EvalResult
            or (values["details"] and not all(type(v) in _PLAIN
                                              for v in values["details"].values()))
            or not _minute_offset(values["event_time"])
            or not _minute_offset(values["evaluated_at"])
            or (judge is not None and not _plain_judge(judge))):
        return dump_json(result)
    try:
        return orjson.dumps(values, default=_judge_fields, option=_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError included: let pydantic decide, and raise
        return dump_json(result)
