"""The committed EvalResult JSON Schema is current, and results validate against it."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest

from evalstream.events import (
    SCHEMA_VERSION,
    EvalResult,
    JudgeInfo,
    dump_json,
    eval_result_json_schema,
    read_result,
)

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


#: The fields (``judge.x`` for the judge's) each schema version added. ``attributes`` and
#: ``judge.capped`` came while results still said 1.0 (before the policy was kept), so
#: results saying 1.0 may lack them. A field added without a new minor version here, or
#: removed or renamed without a new major one, fails the test below.
FIELDS_ADDED: dict[str, set[str]] = {
    "1.0": {"schema_version", "result_id", "event_id", "trace_id", "span_id", "session_id",
            "app", "route", "evaluator", "score", "label", "passed", "threshold",
            "confidence", "probabilities", "raw_score", "details", "reason", "status",
            "error", "judge", "sample_rate", "event_time", "evaluated_at",
            "judge.backend", "judge.model", "judge.latency_ms", "judge.requests",
            "judge.tokens_in", "judge.tokens_out", "judge.cost_usd", "judge.cached",
            "judge.escalated", "attributes", "judge.capped"},
    "1.1": {"evaluator_version"},
    "1.2": {"canary", "gold"},
    "1.3": {"judge.probabilities_from"},
}


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _field_paths() -> set[str]:
    top = set(EvalResult.model_fields)
    return top | {f"judge.{name}" for name in JudgeInfo.model_fields}


def test_schema_version_names_the_fields_results_carry() -> None:
    # The versioning policy (minor: fields added; major: removed, renamed, retyped), checked:
    # a reader decides what a result may hold by its schema_version.
    latest = max(FIELDS_ADDED, key=_version_key)
    assert latest == SCHEMA_VERSION, "FIELDS_ADDED and SCHEMA_VERSION disagree"
    assert set().union(*FIELDS_ADDED.values()) == _field_paths(), (
        "a field added needs a new minor version (FIELDS_ADDED, SCHEMA_VERSION), one removed, "
        "renamed or retyped a new major version")


@pytest.mark.parametrize("version", sorted(FIELDS_ADDED, key=_version_key))
def test_results_of_every_earlier_minor_version_validate_and_read(version: str) -> None:
    # The committed schema and read_result take an older result, whose later fields are
    # simply absent: what a consumer upgraded before its producers meets.
    known = set().union(*(fields for v, fields in FIELDS_ADDED.items()
                          if _version_key(v) <= _version_key(version)))
    full = json.loads(dump_json(EvalResult(
        result_id="r", event_id="e", trace_id="t", route="main", evaluator="refusal",
        score=0.9, label="ok", passed=True, probabilities={"ok": 0.9, "bad": 0.1},
        judge=JudgeInfo(backend="openai", model="m", probabilities_from="logprobs"),
        event_time=datetime(2026, 1, 1, tzinfo=UTC))))
    old = {k: v for k, v in full.items() if k in known}
    old["judge"] = {k: v for k, v in full["judge"].items() if f"judge.{k}" in known}
    old["schema_version"] = version
    assert not [e.message for e in
                jsonschema.Draft202012Validator(committed_schema()).iter_errors(old)]
    read = read_result(dump_json(old))
    assert (read.schema_version, read.score, read.canary, read.evaluator_version) == (
        version, 0.9, False, "1")
