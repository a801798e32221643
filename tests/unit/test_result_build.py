"""result_build: every field of the score is carried onto the published result, in values
JSON can carry (finite numbers, probabilities in 0..1) and times in UTC."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from evalstream.app.bindings import Planned
from evalstream.app.pipeline import Pipeline
from evalstream.app.result_build import error_result, ok_result
from evalstream.evaluators import register
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.events import JudgeInfo, TraceEvent, dump_json
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, settings

VALIDATOR = jsonschema.Draft202012Validator(json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "eval_result.schema.json")
    .read_text(encoding="utf-8")))


def test_an_ok_result_carries_every_field_of_its_score() -> None:
    pipeline = Pipeline(settings(), JUDGES, Metrics(CollectorRegistry()))
    event = TraceEvent(event_id="e1", trace_id="t1", output="ok")
    (planned,) = pipeline.plan(event, topic="traces")
    judge = JudgeInfo(backend="openai", model="m", requests=1, tokens_in=12, cost_usd=0.001)
    score = Score(score=0.25, label="bad", passed=False, threshold=0.5, confidence=0.5,
                  probabilities={"good": 0.25, "bad": 0.75}, raw_score=1.75,
                  details={"k": 1}, reason="too short", judge=judge)
    result = ok_result(event, planned, score, ())
    assert result.status == "ok"
    assert (result.score, result.label, result.passed, result.threshold) == (
        0.25, "bad", False, 0.5)
    assert (result.confidence, result.raw_score) == (0.5, 1.75)
    assert result.probabilities == {"good": 0.25, "bad": 0.75}
    assert (result.details, result.reason, result.judge) == ({"k": 1}, "too short", judge)


def _planned() -> tuple[TraceEvent, Planned]:
    pipeline = Pipeline(settings(), JUDGES, Metrics(CollectorRegistry()))
    event = TraceEvent(event_id="e1", trace_id="t1", output="ok")
    (planned,) = pipeline.plan(event, topic="traces")
    return event, planned


@pytest.mark.parametrize("stamp", [
    "2026-11-29T21:05:00",          # no offset: read as UTC, as the lag metric reads it
    "2026-11-29T23:05:00+02:00",    # another offset: the same instant, written in UTC
    "2026-11-29T21:05:00Z",
])
def test_event_time_is_written_in_utc_whatever_offset_the_event_gave(stamp: str) -> None:
    # A flat_json timestamp without an offset was written as it came ("...T21:05:00"): not
    # an RFC 3339 date-time (the schema's format), and a reader guesses its zone; one with
    # "+02:00" kept it, beside evaluated_at's "Z".
    event, planned = _planned()
    event = event.model_copy(update={"timestamp": TraceEvent(event_id="x",
                                                                 timestamp=stamp).timestamp})
    for result in (ok_result(event, planned, Score(score=0.9, label=None, passed=True), ()),
                   error_result(event, planned, "judge: down", ())):
        wire = json.loads(dump_json(result))
        assert wire["event_time"] == "2026-11-29T21:05:00Z"
        assert wire["evaluated_at"].endswith("Z")
        assert result.event_time == datetime(2026, 11, 29, 21, 5, tzinfo=UTC)


@pytest.mark.parametrize(("field", "value"), [
    ("probabilities", {"good": math.nan, "bad": 0.5}),
    ("probabilities", {"good": 1.5, "bad": -0.5}),
    ("probabilities", {"good": math.inf}),
    ("raw_score", math.nan),
    ("threshold", math.inf),
])
def test_a_score_with_a_value_json_cannot_carry_is_an_error_result(
        field: str, value: object) -> None:
    # JSON has no NaN or infinity: pydantic wrote them as null, so a plugin's NaN
    # probability was published as {"good": null} (invalid against the schema, a number per
    # class), a NaN raw_score as a silent null; and a probability of 1.5 passed as valid.
    event, planned = _planned()
    fields: dict[str, Any] = {"score": 0.5, "label": "good", "passed": True, field: value}
    with pytest.raises(ValidationError, match=field):
        ok_result(event, planned, Score(**fields), ())


async def test_the_pipeline_publishes_that_score_as_an_error_result_naming_the_field() -> None:
    s = settings(routes=[{"name": "main", "evaluators": [{"evaluator": "unit_nan"}]}])
    pipeline = Pipeline(s, JUDGES, Metrics(CollectorRegistry()))
    (result,) = await pipeline.evaluate(TraceEvent(event_id="e", trace_id="t", output="x"),
                                        topic="traces")
    assert (result.status, result.error) == ("error", "invalid score fields: probabilities.yes")
    assert not list(VALIDATOR.iter_errors(json.loads(dump_json(result))))


def test_judge_spend_json_cannot_carry_is_refused() -> None:
    with pytest.raises(ValidationError, match="latency_ms"):
        JudgeInfo(backend="plugin", latency_ms=math.nan)
    with pytest.raises(ValidationError, match="cost_usd"):
        JudgeInfo(backend="plugin", cost_usd=math.inf)


@register
class _NaNProbability(Evaluator[EvaluatorParams]):
    name = "unit_nan"
    summary = "test only: a plugin whose probabilities hold a NaN"

    async def evaluate(self, event: TraceEvent) -> Score:
        return Score(score=0.5, label="yes", passed=True,
                     probabilities={"yes": math.nan, "no": 0.5})
