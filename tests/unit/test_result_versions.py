"""Results are keyed by evaluator@version.

A new version of an evaluator's code, of its config entry (``version:``) or of the builtin
judge re-scores under new result ids, so a backfill after an upgrade is not dropped
downstream as a redelivery; anything else keeps the ids. At version 1 the ids are the ones
published before versions existed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from evalstream.app.pipeline import Pipeline
from evalstream.config import EvaluatorSpec, load_settings
from evalstream.config.judges import judge_identity
from evalstream.config.routes import VERSION_PATTERN
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.events import EvalResult, TraceEvent, dump_json
from evalstream.judges.builtin import BuiltinJudge
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, Scripted, settings

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "eval_result.schema.json"
EVENT = TraceEvent(event_id="e3", trace_id="t3", output="ok")
LLM = {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "gpt-4o-mini"}
CASCADE = {"type": "cascade", "first": "builtin", "then": "llm"}


def spec(**fields: Any) -> dict[str, Any]:
    return {"evaluator": "unit_scripted", **fields}


async def score(*specs: dict[str, Any], event: TraceEvent = EVENT,
                **sections: Any) -> list[EvalResult]:
    """The results of ``specs`` (one route) on ``event``, in spec order."""
    s = settings(routes=[{"name": "main", "evaluators": list(specs)}], **sections)
    judges = {**JUDGES, "llm": JUDGES["builtin"], "cheap-first": JUDGES["builtin"]}
    pipeline = Pipeline(s, judges, Metrics(CollectorRegistry()))
    results = await pipeline.evaluate(event, topic="traces")
    order = [EvaluatorSpec.model_validate(x).label for x in specs]
    return sorted(results, key=lambda r: order.index(r.evaluator))


async def test_ids_published_before_versions_are_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Computed by the release before versions (c8559fc): at version 1 everywhere, an
    # upgrade must not change any id, or downstream would keep a redelivered event's
    # score twice (the old id from the old worker, the new one from the new). The builtin
    # judge's own version has moved on since (its scoring changed), so pin it at 1 here.
    monkeypatch.setattr("evalstream.judges.builtin.VERSION", "1")
    (plain,) = await score(spec())
    assert plain.result_id == "42c3ca5421eee076d6dea8da3140bfaf"
    (reasons,) = await score(spec(reasons="always"))
    assert reasons.result_id == "65184c1a920862f24cb2e092c751bc0c"
    assert (plain.evaluator_version, reasons.evaluator_version) == ("1", "1")


async def test_a_config_version_is_a_new_id_and_shows_in_the_result() -> None:
    (base,) = await score(spec())
    (v2,) = await score(spec(version=2))  # a YAML number is read as its text
    (v2_again,) = await score(spec(version="2"))
    (v3,) = await score(spec(version="3"))
    (v1,) = await score(spec(version="1"))
    assert (v2.evaluator_version, v3.evaluator_version, v1.evaluator_version) == (
        "1+2", "1+3", "1+1")
    assert v2.result_id == v2_again.result_id  # redelivered: the same id
    # Setting a version, even "1", is a change of config like any other.
    assert len({base.result_id, v1.result_id, v2.result_id, v3.result_id}) == 4
    # An error result is keyed and labelled the same way (it stands for the score).
    (failed,) = await score(spec(version="2"), event=EVENT.model_copy(update={"output": "boom"}))
    assert (failed.status, failed.result_id, failed.evaluator_version) == (
        "error", v2.result_id, "1+2")


async def test_an_evaluator_class_version_is_a_new_id(monkeypatch: pytest.MonkeyPatch) -> None:
    (before,) = await score(spec())
    (before_cfg,) = await score(spec(version="2"))
    monkeypatch.setattr(Scripted, "version", "2")  # an upgrade that changed its scoring
    (after,) = await score(spec())
    (after_again,) = await score(spec())
    (after_cfg,) = await score(spec(version="2"))
    assert after.evaluator_version == "2"
    assert after_cfg.evaluator_version == "2+2"
    assert after.result_id == after_again.result_id
    assert len({before.result_id, before_cfg.result_id, after.result_id,
                after_cfg.result_id}) == 4


async def test_a_builtin_judge_version_is_a_new_id_for_what_it_judges(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judges = {"llm": LLM, "cheap-first": CASCADE}
    specs = (spec(name="b"), spec(name="l", judge="llm"), spec(name="c", judge="cheap-first"))
    monkeypatch.setattr("evalstream.judges.builtin.VERSION", "1")
    before = await score(*specs, judges=judges)
    monkeypatch.setattr("evalstream.judges.builtin.VERSION", "2")
    after = await score(*specs, judges=judges)
    changed = {b.evaluator: b.result_id != a.result_id
               for b, a in zip(before, after, strict=True)}
    # The builtin judge, alone or first in a cascade: new ids. The LLM judge alone: same.
    assert changed == {"b": True, "l": False, "c": True}
    # The judge's version is the judge's, not the evaluator's.
    assert {r.evaluator_version for r in after} == {"1"}


def test_judge_identity_names_a_builtin_version_past_the_first() -> None:
    configs = load_settings(None, judges={"llm": LLM, "cheap-first": CASCADE}).judges

    def identity(name: str, builtin: str, prompt: str = "1") -> Any:
        return judge_identity(configs, name, builtin_version=builtin, prompt_version=prompt)

    assert identity("builtin", "1") == "builtin"
    assert identity("builtin", "2") == "builtin@2"
    assert identity("cheap-first", "2")["cascade"][0] == "builtin@2"
    assert identity("llm", "2") == identity("llm", "1")


def test_judge_identity_names_a_prompt_version_past_the_first() -> None:
    # The OpenAI judge's prompt rendering (judges.prompt.PROMPT_VERSION) is the OpenAI
    # judge's: a new one is a new identity of it, alone or in a cascade, never of the
    # builtin judge; at "1" it adds nothing, so the pinned ids hold.
    configs = load_settings(None, judges={"llm": LLM, "cheap-first": CASCADE}).judges

    def identity(name: str, prompt: str) -> Any:
        return judge_identity(configs, name, builtin_version="2", prompt_version=prompt)

    assert identity("llm", "1") == {"model": "gpt-4o-mini", "api": "chat"}
    assert identity("llm", "2") == {"model": "gpt-4o-mini", "api": "chat", "prompt": "2"}
    assert identity("cheap-first", "2")["cascade"] == ["builtin@2", identity("llm", "2")]
    assert identity("builtin", "2") == identity("builtin", "1") == "builtin@2"


async def test_a_prompt_version_is_a_new_id_for_what_the_openai_judge_judges(
        monkeypatch: pytest.MonkeyPatch) -> None:
    judges = {"llm": LLM, "cheap-first": CASCADE}
    specs = (spec(name="b"), spec(name="l", judge="llm"), spec(name="c", judge="cheap-first"))
    before = await score(*specs, judges=judges)
    monkeypatch.setattr("evalstream.judges.prompt.PROMPT_VERSION", "2")
    after = await score(*specs, judges=judges)
    changed = {b.evaluator: b.result_id != a.result_id
               for b, a in zip(before, after, strict=True)}
    assert changed == {"b": False, "l": True, "c": True}
    assert {r.evaluator_version for r in after} == {"1"}


async def test_the_builtin_judge_reports_its_version() -> None:
    from evalstream.judges.builtin import VERSION

    s = settings(routes=[{"name": "main", "evaluators": [{"evaluator": "refusal"}]}])
    pipeline = Pipeline(s, {"builtin": BuiltinJudge()}, Metrics(CollectorRegistry()))
    (result,) = await pipeline.evaluate(
        TraceEvent(event_id="e", trace_id="t", output="I can't help with that."),
        topic="traces")
    assert result.judge is not None
    assert result.judge.model == f"builtin-v{VERSION}"
    assert re.fullmatch(VERSION_PATTERN, VERSION)
    assert result.evaluator_version == registry.get("refusal").version


def test_every_shipped_evaluator_states_its_version() -> None:
    # Inheriting the base's "1" would hide the decision: each states it, so a change to
    # its scoring has a visible line to bump.
    shipped = [registry.get(n) for n in registry.names()
               if registry.get(n).__module__.startswith("evalstream.")]
    assert len(shipped) >= 17
    missing = [cls.name for cls in shipped if "version" not in vars(cls)]
    assert missing == []


@pytest.mark.parametrize("bad", ["", "1+2", "a b", "x" * 33, 2])
def test_register_refuses_a_version_results_cannot_carry(bad: object) -> None:
    class Odd(Evaluator[EvaluatorParams]):
        name = "unit_odd_version"
        version = bad  # type: ignore[assignment]

        async def evaluate(self, event: TraceEvent) -> Score:
            raise AssertionError("not used")

    with pytest.raises(TypeError, match="unit_odd_version"):
        registry.register(Odd)
    assert "unit_odd_version" not in registry.names()


@pytest.mark.parametrize("bad", ["", "1+2", "two words", "x" * 33, True])
def test_a_config_version_must_be_short_and_plain(bad: object) -> None:
    with pytest.raises(ValidationError, match="version"):
        EvaluatorSpec.model_validate({"evaluator": "refusal", "version": bad})


async def test_real_results_carry_the_version_and_match_the_committed_schema() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text("utf-8")))
    ok, = await score(spec(version="2024-11"))
    failed, = await score(spec(version="2024-11"),
                          event=EVENT.model_copy(update={"output": "boom"}))
    for result in (ok, failed):
        body = json.loads(dump_json(result))
        assert body["evaluator_version"] == "1+2024-11"
        assert body["schema_version"] == "1.3"
        assert not [e.message for e in validator.iter_errors(body)]


def test_a_yaml_decimal_version_is_refused_not_read_as_another(tmp_path: Path) -> None:
    # YAML reads 1.10 as the float 1.1: taken as "1.1" it would repeat the ids of an
    # earlier "1.1" and the re-score would be dropped downstream as redeliveries.
    def version_of(text: str) -> str | None:
        path = tmp_path / "evalstream.yaml"
        path.write_text("routes:\n  - name: main\n    evaluators:\n"
                        f"      - evaluator: refusal\n        version: {text}\n", "utf-8")
        return load_settings(path).routes[0].evaluators[0].version

    assert version_of('"1.10"') == "1.10"
    assert version_of("2") == "2"  # an integer keeps its text
    for decimal in ("1.10", "1.0"):
        with pytest.raises(ConfigError, match=r"version.*quote it"):
            version_of(decimal)
