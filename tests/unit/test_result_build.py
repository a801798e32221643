"""Results built without re-validation are the results validation builds, byte for byte."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from evalstream.app.pipeline import Pipeline, Planned
from evalstream.app.results import TRUSTED_KEYS, TRUSTED_KEYS_CURRENT, trusted_score
from evalstream.evaluators.base import Score
from evalstream.events import EvalResult, JudgeInfo, TraceEvent, dump_json
from evalstream.judges.builtin import BuiltinJudge
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import settings

INFO = JudgeInfo(backend="builtin", model="builtin-v1")
EVENT = TraceEvent.model_validate({
    "event_id": "evt-1", "trace_id": "t-1", "span_id": "s-1", "session_id": "sess",
    "app": "bot", "output": "Sure, here it is.", "timestamp": "2026-11-29T12:00:00Z",
    "attributes": {"model": "gpt-4o-mini", "tier": "pro"}})


def make(**sections: Any) -> tuple[Pipeline, Planned]:
    pipeline = Pipeline(settings(
        routes=[{"name": "support", "evaluators": [{"evaluator": "refusal"}]}], **sections),
        {"builtin": BuiltinJudge()}, Metrics(CollectorRegistry()))
    (planned,) = pipeline.plan(EVENT, "traces")
    return pipeline, planned


def same_time(result: EvalResult) -> bytes:
    """The result's JSON with its own ``evaluated_at`` written as a fixed stamp."""
    stamp = json.loads(dump_json(result))["evaluated_at"].encode()
    return dump_json(result).replace(stamp, b"2026-01-01T00:00:00Z")


def assert_same(fast: EvalResult, validated: EvalResult) -> None:
    assert same_time(fast) == same_time(validated)
    assert list(fast.__dict__) == list(validated.__dict__) == list(EvalResult.model_fields)
    assert fast.__pydantic_fields_set__ == validated.__pydantic_fields_set__
    at = validated.evaluated_at
    assert fast.model_copy(update={"evaluated_at": at}) == validated
    assert fast.evaluated_at.tzinfo is UTC


SCORES = [
    Score(score=0.9002495108803149, label="not_refused", passed=True, threshold=0.5,
          confidence=0.8004990217606298,
          probabilities={"not_refused": 0.9002495108803149, "refused": 0.09975048911968509},
          judge=INFO),
    Score(score=0.0, label="refused", passed=False, threshold=1.0, confidence=1.0,
          probabilities={}, raw_score=-3.5, details={"hits": ["a", 1], "n": None},
          reason="opens with an apology", judge=JudgeInfo(backend="openai", cost_usd=0.002)),
    Score(score=None, label="billing", passed=None),  # a label evaluator's
    Score(score=1.0, label=None, passed=True, raw_score=math.inf, threshold=math.nan),
]


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("attributes", [[], ["model", "missing"]])
def test_the_trusted_path_builds_what_validation_builds(score: Score,
                                                        attributes: list[str]) -> None:
    pipeline, planned = make(results={"attributes": attributes})
    assert trusted_score(score)
    assert_same(pipeline._result(EVENT, planned, score),
                pipeline._validated_result(EVENT, planned, score))


def test_the_serialised_form_of_a_refusal_result_is_pinned() -> None:
    # Written by the validated path before results were built without it; must not move.
    pipeline, planned = make()
    expected = (
        b'{"schema_version":"1.0","result_id":"RID","event_id":"evt-1","trace_id":"t-1",'
        b'"span_id":"s-1","session_id":"sess","app":"bot","attributes":{},'
        b'"route":"support","evaluator":"refusal","score":0.9002495108803149,'
        b'"label":"not_refused","passed":true,"threshold":0.5,"confidence":0.8004990217606298,'
        b'"probabilities":{"not_refused":0.9002495108803149,"refused":0.09975048911968509},'
        b'"raw_score":null,"details":{},"reason":null,"status":"ok","error":null,'
        b'"judge":{"backend":"builtin","model":"builtin-v1","latency_ms":0.0,"requests":0,'
        b'"tokens_in":0,"tokens_out":0,"cost_usd":0.0,"cached":false,"escalated":false},'
        b'"sample_rate":1.0,"event_time":"2026-11-29T12:00:00Z",'
        b'"evaluated_at":"2026-01-01T00:00:00Z"}')
    result = pipeline._result(EVENT, planned, SCORES[0])
    assert same_time(result).replace(result.result_id.encode(), b"RID") == expected


@pytest.mark.parametrize("score", [
    Score(score=1, label="x", passed=True),  # an int: validation makes it 1.0
    Score(score=0.5, label="x", passed=1),  # type: ignore[arg-type]
    Score(score=0.5, label="x", passed=True, probabilities={"a": 1}),
    Score(score=0.5, label=type("Label", (str,), {})("x"), passed=True),
])
def test_values_validation_would_change_take_the_validated_path(score: Score) -> None:
    pipeline, planned = make()
    assert not trusted_score(score)
    assert_same(pipeline._result(EVENT, planned, score),
                pipeline._validated_result(EVENT, planned, score))
    assert b'"score":1.0' in dump_json(pipeline._result(EVENT, planned, SCORES[3]))


def test_a_non_str_details_key_is_still_refused() -> None:
    pipeline, planned = make()
    score = Score(score=0.5, label="x", passed=True, details={1: "a"})  # type: ignore[dict-item]
    assert not trusted_score(score)
    with pytest.raises(ValidationError):
        pipeline._result(EVENT, planned, score)


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan])
async def test_out_of_range_scores_still_become_error_results(bad: float) -> None:
    pipeline, planned = make()
    assert not trusted_score(Score(score=bad, label="x", passed=True))

    class Broken:
        async def evaluate(self, event: TraceEvent) -> Score:
            return Score(score=bad, label="x", passed=True)

    planned.bound.evaluator = Broken()  # type: ignore[assignment]
    result = await pipeline.run(EVENT, planned)
    assert result is not None
    assert (result.status, result.error) == ("error", "invalid score fields: score")


def test_results_from_the_builtin_refusal_evaluator_take_the_trusted_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert TRUSTED_KEYS_CURRENT, "add EvalResult's new field to TRUSTED_KEYS and _result"
    assert tuple(EvalResult.model_fields) == TRUSTED_KEYS
    pipeline, planned = make()
    validated = pipeline._validated_result
    evaluator = pipeline.evaluators[0]
    assert isinstance(evaluator.judge, BuiltinJudge)
    for output in ("I'm sorry, but I can't help with that.", "Sure: open Settings."):
        event = EVENT.model_copy(update={"output": output, "timestamp": None})
        coroutine = evaluator.evaluate(event)
        with pytest.raises(StopIteration) as done:
            coroutine.send(None)
        score = done.value.value
        with monkeypatch.context() as patch:
            patch.setattr(pipeline, "_validated_result", None)  # not called: would raise
            result = pipeline._result(event, planned, score)
        assert result.event_time is None
        assert_same(result, validated(event, planned, score))
        assert datetime.now(UTC) >= result.evaluated_at
