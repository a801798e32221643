"""The sink's result JSON is ``dump_json``'s, byte for byte, whichever writer produced it."""

from __future__ import annotations

import math
import random
import struct
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic_core import PydanticSerializationError

from evalstream.events import EvalResult, JudgeInfo, TraceEvent, dump_json
from evalstream.sinks import result_json as module
from evalstream.sinks.result_json import result_json

TEXTS = ["", "plain", "é😀 中文", "quote \" back \\ slash /", "ctl \x00\x1f\x7f\t\n\r",
         "a\u2028b\u2029", "</script>", "x" * 300]
ZONES = [None, UTC, timezone(timedelta(hours=-3, minutes=-30)), timezone(timedelta(hours=5))]


def any_float(rng: random.Random) -> float:
    kind = rng.random()
    if kind < 0.3:
        return rng.random()
    if kind < 0.6:
        return float(struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0])
    if kind < 0.9:
        return rng.random() * 10.0 ** rng.randint(-30, 30)
    return rng.choice([0.0, -0.0, 1.0, 1e16, 1e-7, 5e-324, math.inf, -math.inf, math.nan])


def any_time(rng: random.Random) -> datetime:
    return datetime(rng.randint(1, 9999), rng.randint(1, 12), rng.randint(1, 28),
                    rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                    rng.choice([0, rng.randint(0, 999_999)]), tzinfo=rng.choice(ZONES))


def any_result(rng: random.Random) -> EvalResult:
    unit = rng.random
    details: dict[str, Any] = {rng.choice(TEXTS): rng.choice(
        [rng.choice(TEXTS), rng.randint(-2**63, 2**63 - 1), any_float(rng), True, None])
        for _ in range(rng.randint(0, 3))}
    judge = rng.choice([None, JudgeInfo(
        backend=rng.choice(TEXTS), model=rng.choice([None, "gpt-4o"]),
        latency_ms=abs(any_float(rng)), requests=rng.randint(0, 9),
        tokens_in=rng.randint(0, 10**6), cost_usd=abs(any_float(rng)),
        cached=rng.random() < 0.5)])
    return EvalResult(
        result_id=rng.choice(TEXTS), event_id=rng.choice(TEXTS), trace_id=rng.choice(TEXTS),
        session_id=rng.choice([None, *TEXTS]), app=rng.choice([None, "bot"]),
        attributes={rng.choice(TEXTS): rng.choice(TEXTS) for _ in range(rng.randint(0, 2))},
        route="r", evaluator="e", score=rng.choice([None, unit()]),
        label=rng.choice([None, *TEXTS]), passed=rng.choice([None, True, False]),
        threshold=rng.choice([None, any_float(rng)]), confidence=rng.choice([None, unit()]),
        probabilities={rng.choice(TEXTS): any_float(rng) for _ in range(rng.randint(0, 3))},
        raw_score=rng.choice([None, any_float(rng)]), details=details,
        reason=rng.choice([None, *TEXTS]), status=rng.choice(["ok", "error"]),
        error=rng.choice([None, *TEXTS]), judge=judge, sample_rate=rng.choice([1.0, unit()]),
        event_time=rng.choice([None, any_time(rng)]),
        evaluated_at=rng.choice([datetime.now(UTC), any_time(rng)]))


def test_random_results_are_written_as_dump_json_writes_them() -> None:
    rng = random.Random(20261130)
    for _ in range(3000):
        result = any_result(rng)
        assert result_json(result) == dump_json(result), result


def test_a_refusal_result_takes_the_orjson_path(monkeypatch: pytest.MonkeyPatch) -> None:
    event = TraceEvent.model_validate({"event_id": "e", "timestamp": "2026-11-29T12:00:00Z"})
    result = EvalResult(result_id="r", event_id="e", trace_id="t", route="r", evaluator="e",
                        score=0.9, label="not_refused", passed=True,
                        probabilities={"not_refused": 0.9, "refused": 0.1},
                        judge=JudgeInfo(backend="builtin"), event_time=event.timestamp)
    expected = dump_json(result)
    monkeypatch.setattr(module, "dump_json", None)  # not called: would raise
    assert result_json(result) == expected
    assert result_json(result) == expected  # the judge info, now remembered as plain


@pytest.mark.parametrize("update", [
    {"details": {"when": datetime(2026, 1, 1, tzinfo=UTC), "set": {1}, "t": (1, 2)}},
    {"event_time": datetime(2026, 1, 1, tzinfo=timezone(timedelta(seconds=37)))},
    {"judge": JudgeInfo(backend="x").model_copy(update={"latency_ms": 3})},
    {"details": {"big": 2**70}},
])
def test_what_orjson_might_write_otherwise_goes_to_pydantic(update: dict[str, Any]) -> None:
    result = EvalResult(result_id="r", event_id="e", trace_id="t", route="r",
                        evaluator="e").model_copy(update=update)
    assert result_json(result) == dump_json(result)


def test_a_result_json_cannot_hold_raises_pydantics_error() -> None:
    result = EvalResult(result_id="r", event_id="e", trace_id="t", route="r",
                        evaluator="e", label="\ud800")
    with pytest.raises(PydanticSerializationError):
        dump_json(result)
    with pytest.raises(PydanticSerializationError):
        result_json(result)
