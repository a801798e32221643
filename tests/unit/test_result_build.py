"""result_build.ok_result: every field of the score is carried onto the published result."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from evalstream.app.pipeline import Pipeline
from evalstream.app.result_build import ok_result
from evalstream.evaluators.base import Score
from evalstream.events import JudgeInfo, TraceEvent
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, settings


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
