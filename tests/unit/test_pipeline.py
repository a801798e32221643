"""The pipeline: sampling and routing with counted skips; evaluator outcomes as results."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.pipeline import Pipeline
from evalstream.errors import ConfigError
from evalstream.events import TraceEvent, result_id, result_ids
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, settings


def make(**sections: object) -> tuple[Pipeline, CollectorRegistry]:
    registry = CollectorRegistry()
    return Pipeline(settings(**sections), JUDGES, Metrics(registry)), registry


def ev(i: int = 1, output: str = "ok", **kw: object) -> TraceEvent:
    return TraceEvent.model_validate({"event_id": f"e{i}", "trace_id": f"t{i}",
                                      "output": output, **kw})


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_passing_result_carries_the_contract_fields(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("evalstream.judges.builtin.VERSION", "1")  # the judge here: builtin
    pipeline, registry = make()
    (result,) = await pipeline.evaluate(ev(3, app="bot", session_id="s"), topic="traces")
    spec = pipeline.settings.routes[0].evaluators[0]
    # At version 1 (class, config and builtin judge) the versions add nothing: the id is
    # the one the spec's other fields gave before versions existed (test_result_versions
    # pins it).
    assert result.result_id == result_id(
        "e3", "main", "unit_scripted",
        spec.model_dump(mode="json", exclude={"sample_rate", "version"}))
    assert result.evaluator_version == "1"
    assert (result.event_id, result.trace_id, result.app, result.session_id) == (
        "e3", "t3", "bot", "s")
    assert (result.route, result.evaluator, result.status) == ("main", "unit_scripted", "ok")
    assert (result.score, result.label, result.passed, result.sample_rate) == (
        0.9, "good", True, 1.0)
    assert count(registry, "evalstream_evaluations_total", route="main",
                 evaluator="unit_scripted", outcome="passed") == 1


async def test_results_carry_the_configured_event_attributes_only() -> None:
    attrs = {"model": "gpt-4o", "environment": "prod", "user_id": "u-42"}
    plain, _ = make()
    (result,) = await plain.evaluate(ev(attributes=attrs), topic="traces")
    assert result.attributes == {}  # opt-in: attribute values can be user data
    sliced, _ = make(results={"attributes": ["model", "environment", "tenant"]})
    (result,) = await sliced.evaluate(ev(attributes=attrs), topic="traces")
    assert result.attributes == {"model": "gpt-4o", "environment": "prod"}
    (failed,) = await sliced.evaluate(ev(output="boom", attributes=attrs), topic="traces")
    assert failed.status == "error"
    assert failed.attributes == {"model": "gpt-4o", "environment": "prod"}
    # Clipped: a huge value must not make results (or their error stand-ins) unpublishable.
    (huge,) = await sliced.evaluate(ev(attributes={"model": "m" * 200_000}), topic="traces")
    assert huge.attributes == {"model": "m" * 256}


async def test_an_evaluator_rate_scores_a_nested_subset_of_its_route() -> None:
    # One route, a cheap evaluator on every sampled event and an expensive one on a tenth
    # of them: no second route needed, and the tenth is a subset of what the first scores.
    pipeline, registry = make(sampling={"rate": 0.5}, routes=[{"name": "main", "evaluators": [
        {"evaluator": "unit_scripted", "name": "cheap"},
        {"evaluator": "unit_scripted", "name": "costly", "sample_rate": 0.1}]}])
    scored: dict[str, set[str]] = {"cheap": set(), "costly": set()}
    rates: dict[str, set[float]] = {"cheap": set(), "costly": set()}
    for i in range(4000):
        for r in await pipeline.evaluate(ev(i), topic="traces"):
            scored[r.evaluator].add(r.event_id)
            rates[r.evaluator].add(r.sample_rate)
    assert scored["costly"] <= scored["cheap"]
    assert abs(len(scored["cheap"]) / 4000 - 0.5) < 0.04  # fixed ids: deterministic
    assert abs(len(scored["costly"]) / 4000 - 0.05) < 0.015
    assert rates == {"cheap": {0.5}, "costly": {0.05}}  # weights use the effective rate
    # The route counts its sampled events once, whatever its evaluators' rates.
    assert count(registry, "evalstream_events_sampled_total", route="main") == len(
        scored["cheap"])


async def test_a_route_whose_every_evaluator_has_its_own_rate_scores_only_that_share() -> None:
    # No evaluator at the route's rate: each one's own threshold still applies (the route's
    # shortcut for "every evaluator at 1" must not take this route for one; checked: this
    # fails when it does, and every sampled event was scored).
    pipeline, _ = make(routes=[{"name": "main", "evaluators": [
        {"evaluator": "unit_scripted", "sample_rate": 0.1}]}])
    scored = [len(await pipeline.evaluate(ev(i), topic="traces")) for i in range(2000)]
    assert set(scored) == {0, 1}
    assert abs(sum(scored) / 2000 - 0.1) < 0.02


async def test_an_evaluator_rate_change_keeps_result_ids() -> None:
    full, _ = make()
    tenth, _ = make(routes=[{"name": "main", "evaluators": [
        {"evaluator": "unit_scripted", "sample_rate": 0.1}]}])
    kept = 0
    while not await tenth.evaluate(ev(kept), topic="traces"):
        kept += 1
    (a,) = await full.evaluate(ev(kept), topic="traces")
    (b,) = await tenth.evaluate(ev(kept), topic="traces")
    assert a.result_id == b.result_id


async def test_judge_spend_is_counted_per_route_and_evaluator() -> None:
    pipeline, registry = make()
    for i in range(3):
        await pipeline.evaluate(ev(i, output="costly"), topic="traces")
    await pipeline.evaluate(ev(9), topic="traces")  # free (no judge info)
    assert count(registry, "evalstream_evaluation_cost_usd_total", route="main",
                 evaluator="unit_scripted") == pytest.approx(0.006)


async def test_a_new_judge_model_is_a_new_result_a_renamed_judge_is_not() -> None:
    # Re-scoring a topic with another model (a new consumer group) must not publish
    # results a consumer de-duplicating on result_id would drop as redeliveries.
    def scored_with(judge: str, model: str) -> Pipeline:
        s = settings(
            judges={judge: {"type": "openai", "base_url": "http://127.0.0.1:9/v1",
                            "model": model}},
            routes=[{"name": "main", "evaluators": [
                {"evaluator": "unit_scripted", "judge": judge}]}])
        return Pipeline(s, {**JUDGES, judge: JUDGES["builtin"]}, Metrics(CollectorRegistry()))

    ids = {}
    for key, (judge, model) in {"mini": ("gpt", "gpt-4o-mini"), "big": ("gpt", "gpt-4o"),
                                "renamed": ("grader", "gpt-4o-mini")}.items():
        (result,) = await scored_with(judge, model).evaluate(ev(1), topic="traces")
        ids[key] = result.result_id
    assert ids["mini"] != ids["big"]
    assert ids["mini"] == ids["renamed"]


async def test_same_event_and_config_give_the_same_result_id() -> None:
    a, _ = make()
    b, _ = make()
    (ra,) = await a.evaluate(ev(9), topic="traces")
    (rb,) = await b.evaluate(ev(9), topic="traces")
    assert ra.result_id == rb.result_id
    c, _ = make(routes=[{"name": "main", "evaluators": [
        {"evaluator": "unit_scripted", "params": {}, "reasons": "always"}]}])
    (rc,) = await c.evaluate(ev(9), topic="traces")
    assert rc.result_id != ra.result_id  # a different evaluator config


@pytest.mark.parametrize(("output", "error"), [
    ("judge_error", "judge: upstream 503"), ("boom", "RuntimeError: evaluator bug"),
    ("bad_score", "invalid score fields: score")])
async def test_failures_become_error_results(output: str, error: str) -> None:
    pipeline, registry = make()
    (result,) = await pipeline.evaluate(ev(output=output), topic="traces")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.startswith(error)
    assert result.score is None
    assert count(registry, "evalstream_evaluations_total", route="main",
                 evaluator="unit_scripted", outcome="error") == 1


async def test_error_results_name_the_judge_only_when_one_was_involved() -> None:
    # Consumers slice errors (spend caps, judge failures) by judge: the judge's identity
    # and what the failed call spent ride on the error result, and count as spend; an
    # error no judge had a part in (an evaluator bug, a judge that said nothing) has none.
    pipeline, registry = make()
    (capped,) = await pipeline.evaluate(ev(1, output="judge_error_info"), topic="traces")
    (unusable,) = await pipeline.evaluate(ev(2, output="bad_score_costly"), topic="traces")
    (bug,) = await pipeline.evaluate(ev(3, output="boom"), topic="traces")
    (silent,) = await pipeline.evaluate(ev(4, output="judge_error"), topic="traces")
    assert capped.status == unusable.status == "error"
    assert capped.judge is not None
    assert (capped.judge.backend, capped.judge.model, capped.judge.requests,
            capped.judge.tokens_in) == ("openai", "m", 2, 10)
    assert unusable.judge is not None
    assert unusable.judge.cost_usd == pytest.approx(0.004)
    assert bug.judge is None
    assert silent.judge is None
    assert count(registry, "evalstream_evaluation_cost_usd_total", route="main",
                 evaluator="unit_scripted") == pytest.approx(0.007)


async def test_evaluator_skips_are_counted_by_reason() -> None:
    pipeline, registry = make()
    assert await pipeline.evaluate(ev(output="skip"), topic="traces") == []
    assert count(registry, "evalstream_events_skipped_total", reason="no_thing") == 1


async def test_skip_reasons_stay_a_bounded_set_of_codes() -> None:
    # A plugin may build its reason from the event: the label must not carry content, nor
    # grow a series per event.
    pipeline, registry = make()
    await pipeline.evaluate(ev(output="skip:User said: my card 4111 was declined"),
                            topic="traces")
    for i in range(100):
        await pipeline.evaluate(ev(i, output=f"skip:code_{i}"), topic="traces")
    reasons = {s.labels["reason"] for m in registry.collect() for s in m.samples
               if s.name == "evalstream_events_skipped_total"}
    assert len(reasons - {"sampling", "no_route"}) == 32  # the pipeline's own two, and 32
    assert "code_0" in reasons
    assert count(registry, "evalstream_events_skipped_total", reason="other") == 1 + 100 - 31


async def test_sampling_and_no_route_skips() -> None:
    pipeline, registry = make(
        sampling={"rate": 0.5},
        routes=[{"name": "bot", "match": {"app": ["bot"]}, "sample_rate": 1.0,
                 "evaluators": [{"evaluator": "unit_scripted"}]}])
    results = [await pipeline.evaluate(ev(i, app="bot"), topic="traces") for i in range(400)]
    evaluated = sum(len(r) for r in results)
    assert 150 < evaluated < 250
    assert all(r[0].sample_rate == 0.5 for r in results if r)
    assert count(registry, "evalstream_events_skipped_total", reason="sampling") == (
        400 - evaluated)
    assert count(registry, "evalstream_events_sampled_total", route="bot") == evaluated
    # A sampled event that matches no route is a no_route skip.
    kept = next(i for i, r in enumerate(results) if r)
    assert await pipeline.evaluate(ev(kept, app="other"), topic="traces") == []
    assert count(registry, "evalstream_events_skipped_total", reason="no_route") == 1


async def test_all_routing_runs_every_matching_route() -> None:
    # Route a requires an output, so b (which does not) is reachable with routing: first.
    routes = [{"name": "a", "match": {"requires": ["output"]},
               "evaluators": [{"evaluator": "unit_scripted"}]},
              {"name": "b", "sample_rate": 1.0, "evaluators": [
                  {"evaluator": "unit_scripted"}, {"evaluator": "unit_labels"}]}]
    first, _ = make(routes=routes)
    assert [r.route for r in await first.evaluate(ev(), topic="traces")] == ["a"]
    every, registry = make(routes=routes, worker={"routing": "all"})
    results = await every.evaluate(ev(output="the bill"), topic="traces")
    assert sorted((r.route, r.evaluator) for r in results) == [
        ("a", "unit_scripted"), ("b", "unit_labels"), ("b", "unit_scripted")]
    # Routes a and b run the same evaluator config on this event: two results, not one
    # result delivered twice, so their ids differ (consumers de-duplicate on the id).
    assert len({r.result_id for r in results}) == 3
    assert count(registry, "evalstream_labels_total", route="b", evaluator="unit_labels",
                 label="billing") == 1
    await every.evaluate(ev(2, output="x"), topic="traces")
    # Labels outside the evaluator's closed set collapse to "other" (bounded cardinality).
    assert count(registry, "evalstream_labels_total", route="b", evaluator="unit_labels",
                 label="other") == 1
    assert count(registry, "evalstream_evaluations_total", route="b",
                 evaluator="unit_labels", outcome="labelled") == 2


def test_bad_evaluator_params_and_plugins_fail_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"routes\[0\] \(main\) evaluators\[0\]"):
        make(routes=[{"name": "main", "evaluators": [
            {"evaluator": "unit_scripted", "params": {"nope": 1}}]}])
    with pytest.raises(ConfigError, match=r"plugins\.0: cannot import 'no_such_module_x'"):
        make(plugins=["no_such_module_x"])


def test_may_sample_uses_the_highest_route_rate() -> None:
    pipeline, _ = make(sampling={"rate": 0.5}, routes=[
        {"name": "a", "sample_rate": 0.2, "match": {"requires": ["output"]},
         "evaluators": [{"evaluator": "unit_scripted"}]},
        {"name": "b", "sample_rate": 0.6, "evaluators": [{"evaluator": "unit_scripted"}]}])
    keys = [f"t{i}" for i in range(5000)]
    share = sum(pipeline.may_sample(k) for k in keys) / len(keys)
    assert abs(share - 0.3) < 0.03


@pytest.mark.parametrize("config", [
    {"evaluator": "refusal", "name": None, "params": {}},
    {"z": 1, "a": {"y": [1, {"b": 2, "a": "\u00e9"}], "b": None}, "\u00e9": "x"},
    {},
])
def test_the_precomputed_result_id_equals_result_id(config: dict[str, object]) -> None:
    of = result_ids("route", "lab", config)
    for event_id in ("e1", "evt-\u00e9\"quoted\"\n", ""):
        assert of(event_id) == result_id(event_id, "route", "lab", config)
    assert of("e1") != result_ids("route", "other", config)("e1")
    assert of("e1") != result_ids("other", "lab", config)("e1")


async def test_end_to_end_lag_is_measured_from_the_event_time() -> None:
    pipeline, registry = make()
    old = datetime.now(UTC) - timedelta(seconds=120)
    await pipeline.evaluate(ev(5, timestamp=old), topic="traces")
    naive = (datetime.now(UTC) - timedelta(seconds=120)).replace(tzinfo=None)
    await pipeline.evaluate(ev(6, timestamp=naive), topic="traces")
    assert count(registry, "evalstream_end_to_end_lag_seconds_count") == 2
    assert count(registry, "evalstream_end_to_end_lag_seconds_bucket", le="60.0") == 0
    assert count(registry, "evalstream_end_to_end_lag_seconds_bucket", le="300.0") == 2
    assert 240 <= count(registry, "evalstream_end_to_end_lag_seconds_sum") < 250
