"""The committed EvalResult JSON Schema is current, and results validate against it."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema

from evalstream.events import EvalResult, JudgeInfo, dump_json, eval_result_json_schema

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "eval_result.schema.json"


def committed_schema() -> dict[str, object]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_committed_schema_is_up_to_date() -> None:
    assert committed_schema() == eval_result_json_schema(), (
        "schemas/eval_result.schema.json is stale: run `python schemas/generate.py`")


def test_generator_writes_the_committed_text() -> None:
    spec = importlib.util.spec_from_file_location("gen", SCHEMA_PATH.parent / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.render("eval_result.schema.json") == SCHEMA_PATH.read_text(encoding="utf-8")


def test_schema_accepts_results_and_rejects_broken_ones() -> None:
    validator = jsonschema.Draft202012Validator(committed_schema())
    full = EvalResult(
        result_id="r", event_id="e", trace_id="t", route="main", evaluator="refusal",
        score=0.9, label="not_refused", passed=True, threshold=0.5, confidence=0.8,
        probabilities={"not_refused": 0.9, "refused": 0.1}, details={"k": [1, 2]},
        judge=JudgeInfo(backend="builtin", latency_ms=0.2), sample_rate=0.25,
        event_time=datetime(2026, 1, 1, tzinfo=UTC))
    error = EvalResult(result_id="r", event_id="e", trace_id="t", route="main",
                       evaluator="refusal", status="error", error="judge: timeout")
    canary = full.model_copy(update={"canary": True, "gold": "true", "sample_rate": 1.0})
    # An error a judge had a part in names it (and what the failed call spent).
    judge_error = error.model_copy(update={"judge": JudgeInfo(
        backend="openai", model="m", requests=2, tokens_in=100, tokens_out=1,
        cost_usd=0.052)})
    for result in (full, error, canary, judge_error):
        validator.validate(json.loads(dump_json(result)))
    assert json.loads(dump_json(canary))["canary"] is True
    wrong = json.loads(dump_json(canary))
    wrong["canary"] = "yes"
    assert not validator.is_valid(wrong)
    broken = json.loads(dump_json(full))
    broken["score"] = 1.5
    assert not validator.is_valid(broken)
    del broken["score"]
    del broken["route"]
    assert not validator.is_valid(broken)
