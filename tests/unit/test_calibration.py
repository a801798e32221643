"""Canaries: gold values read and validated, always planned, counted as calibration only,
and the live counters give exactly the offline report's accuracy, Brier score and ECE."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.calibration import (
    BIN_LABELS,
    Calibration,
    CanaryGold,
    Comparison,
    canary_marker,
    compare,
    confidence_bin,
    read_gold,
)
from evalstream.app.monitor import DriftMonitor
from evalstream.app.offline_report import EvaluatorSummary, expected_calibration_error
from evalstream.app.pipeline import Pipeline
from evalstream.config.drift import DriftSettings
from evalstream.events import EvalResult, TraceEvent
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, settings

CANARY = {"evalstream.canary": "true"}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# --- marking and gold values ----------------------------------------------------------


@pytest.mark.parametrize(("attributes", "expected"), [
    ({}, False), ({"model": "m"}, False), ({"evalstream.canary": "true"}, True),
    ({"evalstream.canary": " TRUE "}, True), ({"evalstream.canary": "false"}, False),
    ({"evalstream.canary": "yes"}, None), ({"evalstream.canary": ""}, None),
])
def test_canary_marker(attributes: dict[str, str], expected: bool | None) -> None:
    assert canary_marker(attributes) is expected


@pytest.mark.parametrize(("raw", "is_label", "labels", "expected"), [
    ("true", False, (), CanaryGold(True)),
    (" False", False, (), CanaryGold(False)),
    ("1", False, (), CanaryGold(None, "invalid_gold")),
    ("billing", False, (), CanaryGold(None, "invalid_gold")),
    ("billing", True, ("billing", "other"), CanaryGold("billing")),
    ("Billing", True, ("billing", "other"), CanaryGold(None, "invalid_gold")),
    ("", True, (), CanaryGold(None, "invalid_gold")),
    ("x" * 256, True, (), CanaryGold("x" * 256)),
    ("x" * 257, True, (), CanaryGold(None, "invalid_gold")),
    ("anything", True, (), CanaryGold("anything")),
    (None, False, (), CanaryGold(None, "no_gold")),
])
def test_gold_values_are_validated_per_evaluator_kind(
        raw: str | None, is_label: bool, labels: tuple[str, ...], expected: CanaryGold) -> None:
    attributes = {} if raw is None else {"evalstream.gold.check": raw}
    assert read_gold(attributes, "check", is_label=is_label, labels=labels) == expected


def test_gold_text_is_what_results_publish() -> None:
    assert CanaryGold(True).text == "true"
    assert CanaryGold(False).text == "false"
    assert CanaryGold("billing").text == "billing"
    assert CanaryGold(None, "invalid_gold").text is None


@pytest.mark.parametrize(("confidence", "label"), [
    (0.0, "0.0"), (0.05, "0.0"), (0.1, "0.1"), (0.3, "0.3"), (0.7, "0.7"), (0.99, "0.9"),
    (1.0, "0.9"), (-0.2, "0.0"), (1.5, "0.9"),
])
def test_ece_bins_are_ten_equal_widths_labelled_by_their_lower_edge(
        confidence: float, label: str) -> None:
    # A bin holds its lower edge; 1.0 (and anything past the ends) falls in an end bin.
    assert BIN_LABELS[confidence_bin(confidence)] == label


def test_binary_confidence_is_that_of_the_verdict_given() -> None:
    failed = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                        evaluator="refusal", passed=False, score=0.3)
    comparison = compare(failed, True)
    assert comparison is not None
    assert (comparison.predicted, comparison.correct) == ("false", False)
    assert comparison.brier == pytest.approx(0.49)  # p(pass) 0.3 against gold 1
    assert comparison.confidence == pytest.approx(0.7)  # p(fail): the verdict given
    # No score: the verdict is the forecast, with full confidence.
    bare = failed.model_copy(update={"score": None})
    assert compare(bare, False) == Comparison("false", "false", 0.0, 1.0)
    # Probabilities without a predicted class: nothing to compare.
    assert compare(EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                              evaluator="topic", probabilities={"billing": 1.0}),
                   "billing") is None


def test_a_class_the_forecast_gives_no_probability_counts_as_zero() -> None:
    result = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                        evaluator="topic", label="billing",
                        probabilities={"billing": 0.6, "shipping": 0.4})
    # Gold outside the forecast: its probability was 0, so it adds (0 - 1)^2.
    assert compare(result, "other").brier == pytest.approx(0.6**2 + 0.4**2 + 1.0)
    # A predicted class missing from its own probabilities: confidence 0, not 1.
    unsure = result.model_copy(update={"label": "refund"})
    comparison = compare(unsure, "refund")
    assert comparison is not None
    assert comparison.confidence == 0.0


# --- live counters against the offline report ------------------------------------------


def binary_result(rng: random.Random) -> EvalResult:
    score = rng.random()
    return EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                      evaluator="refusal", score=score, passed=score >= 0.5,
                      confidence=abs(score - 0.5) * 2)


def label_result(rng: random.Random) -> EvalResult:
    weights = [rng.random() for _ in range(3)]
    probs = {k: w / sum(weights) for k, w in zip(("billing", "tech", "other"), weights,
                                                 strict=True)}
    return EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                      evaluator="topic", label=max(probs, key=lambda k: probs[k]),
                      probabilities=probs)


@pytest.mark.parametrize("kind", ["binary", "label"])
def test_live_counters_give_the_offline_figures(kind: str) -> None:
    rng = random.Random(8)
    registry = CollectorRegistry()
    calibration = Calibration(Metrics(registry))
    summary = EvaluatorSummary("chat", kind)
    for _ in range(500):
        if kind == "binary":
            result = binary_result(rng)
            gold: bool | str = rng.random() < (result.score or 0) * 0.8 + 0.1
        else:
            result = label_result(rng)
            gold = rng.choice(("billing", "tech", "other"))
        calibration.record("chat", kind, "gpt", CanaryGold(gold), result)
        summary.add(result, gold)

    labels = {"route": "chat", "evaluator": kind, "judge": "gpt"}
    n = sum(value(registry, "evalstream_canary_calibration_results_total", **labels, bin=b)
            for b in BIN_LABELS)
    agreed = value(registry, "evalstream_canary_evaluations_total", **labels, outcome="agreed")
    disagreed = value(registry, "evalstream_canary_evaluations_total", **labels,
                      outcome="disagreed")
    correct = sum(value(registry, "evalstream_canary_calibration_correct_total", **labels,
                        bin=b) for b in BIN_LABELS)
    # What the README's PromQL computes from increase() of these counters.
    ece = sum(abs(value(registry, "evalstream_canary_calibration_correct_total", **labels, bin=b)
                  - value(registry, "evalstream_canary_calibration_confidence_total",
                          **labels, bin=b))
              for b in BIN_LABELS) / n
    brier = value(registry, "evalstream_canary_brier_total", **labels) / n

    assert n == len(summary.gold) == 500 == agreed + disagreed
    assert correct == agreed == sum(summary.correct)
    assert brier == pytest.approx(sum(summary.brier) / len(summary.brier), abs=1e-12)
    assert ece == pytest.approx(expected_calibration_error(summary.confidence, summary.correct),
                                abs=1e-12)
    assert 0.0 < ece < 1.0
    assert 0.0 < agreed / n < 1.0


def test_outcomes_without_a_comparison() -> None:
    registry = CollectorRegistry()
    calibration = Calibration(Metrics(registry))
    ok = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                    evaluator="x", score=0.9, passed=True)
    error = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                       evaluator="x", status="error", error="judge: down")
    verdictless = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                             evaluator="x", label="billing")  # no probabilities
    calibration.record("chat", "x", "builtin", CanaryGold(True), error)
    calibration.record("chat", "x", "builtin", CanaryGold(None, "no_gold"), ok)
    calibration.record("chat", "x", "builtin", CanaryGold(None), ok)  # no gold, no reason
    calibration.record("chat", "x", "builtin", CanaryGold(None, "invalid_gold"), ok)
    calibration.record("chat", "x", "builtin", CanaryGold("billing"), verdictless)
    calibration.record("chat", "x", "builtin", CanaryGold(True), verdictless)
    labels = {"route": "chat", "evaluator": "x", "judge": "builtin"}
    outcomes = {o: value(registry, "evalstream_canary_evaluations_total", **labels, outcome=o)
                for o in ("error", "no_gold", "invalid_gold", "unscored", "agreed")}
    assert outcomes == {"error": 1, "no_gold": 2, "invalid_gold": 1, "unscored": 2,
                        "agreed": 0}
    assert value(registry, "evalstream_canary_brier_total", **labels) == 0


# --- the pipeline: always planned, never traffic ----------------------------------------


def make(**sections: object) -> tuple[Pipeline, CollectorRegistry]:
    registry = CollectorRegistry()
    base: dict[str, object] = {
        "sampling": {"rate": 0.01},
        "routes": [{"name": "main", "sample_rate": 0.5, "evaluators": [
            {"evaluator": "unit_scripted"},
            {"evaluator": "unit_labels", "sample_rate": 0.1}]}],
    }
    return Pipeline(settings(**{**base, **sections}), JUDGES, Metrics(registry)), registry


def event(i: int, output: str = "ok", **attributes: str) -> TraceEvent:
    return TraceEvent(event_id=f"e{i}", trace_id=f"t{i}", output=output,
                      attributes=attributes)


#: Every traffic series a canary must stay out of.
TRAFFIC = ("evalstream_evaluations_total", "evalstream_evaluations_weighted_total",
           "evalstream_evaluations_weight_squared_total", "evalstream_labels_weighted_total",
           "evalstream_score_count", "evalstream_labels_total",
           "evalstream_events_sampled_total")


def traffic_total(registry: CollectorRegistry) -> float:
    return sum(s.value for m in registry.collect() for s in m.samples if s.name in TRAFFIC)


async def test_canaries_are_evaluated_whatever_the_sampling_and_not_counted_as_traffic() -> None:
    pipeline, registry = make()
    results = []
    for i in range(50):  # at 0.01 x 0.5 (x 0.1) almost none would be sampled
        output = "fail" if i % 5 == 0 else "ok"
        results += await pipeline.evaluate(
            event(i, output, **CANARY, **{"evalstream.gold.unit_scripted": "true",
                                          "evalstream.gold.unit_labels": "billing"}),
            topic="traces")
    assert len(results) == 100
    assert all(r.canary and r.sample_rate == 1.0 for r in results)
    scripted = [r for r in results if r.evaluator == "unit_scripted"]
    assert {r.gold for r in scripted} == {"true"}
    assert {r.gold for r in results if r.evaluator == "unit_labels"} == {"billing"}
    assert traffic_total(registry) == 0
    assert value(registry, "evalstream_events_skipped_total", reason="sampling") == 0
    labels = {"route": "main", "evaluator": "unit_scripted", "judge": "builtin"}
    assert value(registry, "evalstream_canary_evaluations_total", **labels,
                 outcome="agreed") == 40
    assert value(registry, "evalstream_canary_evaluations_total", **labels,
                 outcome="disagreed") == 10
    # unit_labels gives no probabilities: compared on nothing, counted as unscored.
    assert value(registry, "evalstream_canary_evaluations_total", route="main",
                 evaluator="unit_labels", judge="builtin", outcome="unscored") == 50
    # Brier: 40 x (0.9 - 1)^2 + 10 x (0.2 - 1)^2.
    assert value(registry, "evalstream_canary_brier_total", **labels) == pytest.approx(
        40 * 0.01 + 10 * 0.64)


async def test_ordinary_events_are_still_sampled() -> None:
    pipeline, registry = make()
    for i in range(200):
        await pipeline.evaluate(event(i), topic="traces")
    sampled = value(registry, "evalstream_events_sampled_total", route="main")
    assert sampled < 10
    assert value(registry, "evalstream_events_skipped_total", reason="sampling") == 200 - sampled


async def test_bad_markings_are_counted_never_raised() -> None:
    pipeline, registry = make(sampling={"rate": 1.0}, routes=[{"name": "main", "evaluators": [
        {"evaluator": "unit_scripted"}, {"evaluator": "unit_labels"}]}])
    # Bad gold values: the canary is still evaluated, its gold counted as invalid.
    (a, b) = await pipeline.evaluate(event(1, **CANARY, **{
        "evalstream.gold.unit_scripted": "maybe", "evalstream.gold.unit_labels": "nope",
        "evalstream.gold.no_such_evaluator": "true"}), topic="traces")
    assert a.canary
    assert a.gold is None
    assert b.gold is None
    for evaluator in ("unit_scripted", "unit_labels"):
        assert value(registry, "evalstream_canary_evaluations_total", route="main",
                     evaluator=evaluator, judge="builtin", outcome="invalid_gold") == 1
    assert value(registry, "evalstream_canary_gold_ignored_total",
                 reason="unknown_evaluator") == 1
    # A marker that is neither true nor false: ordinary traffic, counted.
    results = await pipeline.evaluate(event(2, **{"evalstream.canary": "yes"}), topic="traces")
    assert results
    assert not any(r.canary for r in results)
    assert value(registry, "evalstream_canary_gold_ignored_total", reason="invalid_marker") == 1
    # Gold without the marker: ordinary traffic, its gold unused and counted.
    results = await pipeline.evaluate(event(3, **{"evalstream.gold.unit_scripted": "true"}),
                                      topic="traces")
    assert results
    assert not any(r.canary or r.gold for r in results)
    assert value(registry, "evalstream_canary_gold_ignored_total", reason="not_canary") == 1


async def test_canaries_are_routed_by_the_route_rules() -> None:
    pipeline, registry = make(routes=[
        {"name": "billing", "match": {"app": ["billing-bot"]},
         "evaluators": [{"evaluator": "unit_scripted"}]}])
    routed = TraceEvent(event_id="e1", trace_id="t1", output="ok", app="billing-bot",
                        attributes=CANARY)
    unrouted = routed.model_copy(update={"event_id": "e2", "app": "other-bot"})
    assert [r.route for r in await pipeline.evaluate(routed, topic="traces")] == ["billing"]
    assert await pipeline.evaluate(unrouted, topic="traces") == []
    assert value(registry, "evalstream_canary_gold_ignored_total", reason="no_route") == 1
    assert value(registry, "evalstream_events_skipped_total", reason="no_route") == 1
    # One skip per message: an unrouted canary is not also a sampling skip.
    assert value(registry, "evalstream_events_skipped_total", reason="sampling") == 0
    assert value(registry, "evalstream_canary_evaluations_total", route="billing",
                 evaluator="unit_scripted", judge="builtin", outcome="no_gold") == 1


async def test_a_skipped_canary_is_counted_with_the_canaries() -> None:
    pipeline, registry = make()
    assert await pipeline.evaluate(event(1, "skip", **CANARY), topic="traces") != []
    assert value(registry, "evalstream_canary_evaluations_total", route="main",
                 evaluator="unit_scripted", judge="builtin", outcome="skipped") == 1
    assert value(registry, "evalstream_events_skipped_total", reason="no_thing") == 1
    assert value(registry, "evalstream_evaluations_total", route="main",
                 evaluator="unit_scripted", outcome="skipped") == 0


async def test_canaries_off_means_ordinary_traffic() -> None:
    pipeline, registry = make(canaries={"enabled": False})
    results = []
    for i in range(100):
        results += await pipeline.evaluate(event(i, **CANARY), topic="traces")
    assert len(results) < 10
    assert not any(r.canary for r in results)
    assert value(registry, "evalstream_events_skipped_total", reason="sampling") >= 90


def test_drift_monitor_ignores_canary_results() -> None:
    metrics = Metrics()
    monitor = DriftMonitor(DriftSettings(windows_s=[60], bucket_s=1, min_samples=1), metrics,
                           clock=lambda: 1_800_000_000.0)
    canary = EvalResult(result_id="r", event_id="e", trace_id="t", route="chat",
                        evaluator="refusal", passed=False, canary=True, gold="true")
    for _ in range(20):
        monitor.observe(canary)
    monitor.observe(canary.model_copy(update={"canary": False, "passed": True}))
    monitor.tick()
    assert metrics.registry.get_sample_value(
        "evalstream_pass_rate_samples",
        {"route": "chat", "evaluator": "refusal", "window": "1m"}) == 1


async def test_a_route_rate_of_0_turns_it_off_for_canaries_too() -> None:
    pipeline, registry = make(routes=[
        {"name": "off", "sample_rate": 0, "evaluators": [{"evaluator": "unit_labels"}]},
        {"name": "main", "evaluators": [{"evaluator": "unit_scripted"}]}],
        worker={"routing": "all"})
    results = await pipeline.evaluate(
        event(1, **CANARY, **{"evalstream.gold.unit_labels": "billing"}), topic="traces")
    assert [(r.route, r.evaluator) for r in results] == [("main", "unit_scripted")]
    # Its gold answer names an evaluator of a route it matched (off), not an unknown one.
    assert value(registry, "evalstream_canary_gold_ignored_total",
                 reason="unknown_evaluator") in (None, 0)
    # Only the route turned off: nothing to run, counted as a sampling skip.
    pipeline, registry = make(routes=[
        {"name": "off", "sample_rate": 0, "evaluators": [{"evaluator": "unit_labels"}]}])
    assert await pipeline.evaluate(event(2, **CANARY), topic="traces") == []
    assert value(registry, "evalstream_events_skipped_total", reason="sampling") == 1
