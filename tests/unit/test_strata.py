"""Per-stratum sampling rates on a route (``strata``): validation naming the field, one
deterministic, nested decision per stratum, results weighted by the rate they were sampled
at, and the checks that keep a stratum from being a silent filter."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from evalstream.app.checks import check_fields_provided
from evalstream.app.config_warnings import config_warnings
from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import attributes_read
from evalstream.config import load_settings
from evalstream.config.routes import Strata
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.events import TraceEvent
from evalstream.formats import NEVER_SET
from evalstream.metrics import Metrics
from evalstream.sampling import Sampler
from tests.unit.pipeline_doubles import JUDGES, settings

CANARY = {"evalstream.canary": "true"}


def route(strata: dict[str, Any] | None, sample_rate: float = 0.2, **extra: Any) -> dict[str, Any]:
    return {"name": "support", "sample_rate": sample_rate, "evaluators": [
        {"evaluator": "unit_scripted", "name": "cheap"},
        {"evaluator": "unit_scripted", "name": "costly", "sample_rate": 0.5}],
            **({"strata": strata} if strata is not None else {}), **extra}


def make(*routes: dict[str, Any], **sections: Any) -> tuple[Pipeline, CollectorRegistry]:
    registry = CollectorRegistry()
    s = settings(routes=list(routes), **sections)
    return Pipeline(s, JUDGES, Metrics(registry)), registry


def ev(i: int, output: str = "ok", app: str | None = None, **attributes: str) -> TraceEvent:
    # Trace ids spread like real ones (hex), so shares come out near their rates.
    return TraceEvent(event_id=f"e{i}", trace_id=f"{(i * 0x9E3779B97F4A7C15) % (1 << 128):032x}",
                      output=output, app=app, attributes=attributes)


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


# --- Validation, naming the field ----------------------------------------------------------

@pytest.mark.parametrize(("strata", "needle"), [
    ({"by": "", "rates": {"a": 0.1}}, "routes.0.strata.by"),
    ({"by": "  ", "rates": {"a": 0.1}}, "routes.0.strata.by"),
    ({"rates": {"a": 0.1}}, "routes.0.strata.by"),
    ({"by": "tenant", "rates": {}}, "routes.0.strata.rates"),
    ({"by": "tenant"}, "routes.0.strata.rates"),
    ({"by": "tenant", "rates": {"acme": 1.5}}, "routes.0.strata.rates.acme"),
    ({"by": "tenant", "rates": {"acme": -0.1}}, "routes.0.strata.rates.acme"),
    ({"by": "tenant", "rates": {"acme": 0.1}, "rate": 0.3}, "routes.0.strata.rate"),
    # A prefix as in match values would be compared exactly, and never apply.
    ({"by": "app", "rates": {"checkout-*": 0.1, "cart": 0.5}},
     "routes.0.strata.rates: Value error, ['checkout-*']: stratum values are matched exactly"),
    ({"by": "model", "rates": {"*": 0.1}}, "routes.0.strata.rates"),
])
def test_bad_strata_are_refused_naming_the_field(strata: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings(routes=[route(strata)])
    assert needle in str(info.value)


@pytest.mark.parametrize(("strata", "says"), [
    ({"by": "  ", "rates": {"a": 0.1}}, "app, topic, or an event attribute"),
    ({"by": "", "rates": {"a": 0.1}}, "app, topic, or an event attribute"),
    ({"by": "tenant", "rates": {}}, "give at least one `value: rate`, or remove strata"),
])
def test_an_empty_strata_field_says_what_belongs_there(strata: dict[str, Any],
                                                        says: str) -> None:
    # pydantic's own words ("String should match pattern '\\S'", "Dictionary should have
    # at least 1 item") named no remedy.
    with pytest.raises(ConfigError, match=re.escape(says)):
        settings(routes=[route(strata)])


@pytest.mark.parametrize(("key", "kind"), [(42, "a number"), (True, "a boolean"),
                                           (None, "null")])
def test_a_stratum_value_yaml_reads_as_no_text_says_to_quote_it(tmp_path: Path, key: object,
                                                                 kind: str) -> None:
    # A numeric tenant id (or yes/true, ~) is no text in YAML: the plain pydantic message
    # ("Input should be a valid string" at rates.1.[key], True shown as 1) hid why
    # (checked: this test fails without the validator that says it).
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"routes": [route({"by": "tenant", "rates": {key: 0.5}})]}),
                      encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert "routes.0.strata.rates:" in str(info.value)
    assert f"key {key!r} reads as {kind} in YAML" in str(info.value)
    assert 'quote each as written, e.g. "42": 0.5' in str(info.value)


def test_a_session_route_needs_session_sampling_when_any_stratum_is_below_1(
        tmp_path: Path) -> None:
    whole = route({"by": "tenant", "rates": {"acme": 1.0}}, sample_rate=1.0,
                  session={"gap_s": 5})
    whole["evaluators"] = whole["evaluators"][:1]
    settings(routes=[whole])  # every rate 1: nothing is sampled out, whatever the key
    partial = {**whole, "strata": {"by": "tenant", "rates": {"acme": 0.5}}}
    with pytest.raises(ConfigError, match=r"routes\[0\] \(support\)\.session: .* needs "
                                          r"sampling\.key: session_id"):
        settings(routes=[partial])
    settings(routes=[partial], sampling={"key": "session_id"})


async def test_a_session_route_may_turn_a_stratum_off_on_any_sampling_key() -> None:
    # A stratum at 0 leaves every event of its conversations out, so each session stays
    # whole: turning one tenant off must not need sampling.key: session_id (which resamples
    # every other route). It was refused as "below a sampling rate of 1" (checked: this
    # test fails without the fix). A rate strictly between 0 and 1 is still refused.
    convo = route({"by": "tenant", "rates": {"paused": 0.0}}, sample_rate=1.0,
                  session={"gap_s": 5})
    convo["evaluators"] = convo["evaluators"][:1]
    pipeline, _ = make(convo)
    assert pipeline.plan(ev(1, tenant="paused"), "traces") == []
    assert [p.bound.label for p in pipeline.plan(ev(2, tenant="acme"), "traces")] == ["cheap"]
    with pytest.raises(ConfigError, match=r"routes\[0\] \(support\)\.session: .* needs "
                                          r"sampling\.key: session_id"):
        settings(routes=[convo], sampling={"rate": 0.5})


# --- Decisions: one fraction, a threshold per stratum --------------------------------------

async def test_each_stratum_is_sampled_at_its_own_nested_rate() -> None:
    pipeline, registry = make(route({"by": "tenant", "rates": {
        "acme": 0.1, "tiny-co": 1.0, "paused": 0.0}}), sampling={"rate": 0.5})
    sampler: Sampler = pipeline.sampler
    expected_rates = {"acme": 0.5 * 0.1, "tiny-co": 0.5 * 1.0, "paused": 0.0, "other": 0.5 * 0.2}
    # An event in no stratum (no attribute at all) takes the route's rate, as an unlisted one.
    for tenant, rate in [*expected_rates.items(), (None, 0.5 * 0.2)]:
        seen: dict[str, set[str]] = {"cheap": set(), "costly": set()}
        for i in range(2000):
            attrs = {} if tenant is None else {"tenant": tenant}
            event = ev(i, **attrs)
            fraction = sampler.fraction(event)
            results = await pipeline.evaluate(event, topic="traces")
            for r in results:
                seen[r.evaluator].add(r.event_id)
                want = rate if r.evaluator == "cheap" else rate * 0.5
                assert r.sample_rate == want  # the effective rate: global x stratum x own
            # Deterministic and nested: exactly the events below each threshold.
            want_run = {name for name, r in (("cheap", rate), ("costly", rate * 0.5))
                        if fraction < r}
            assert {r.evaluator for r in results} == want_run
        assert seen["costly"] <= seen["cheap"]
        if rate:
            assert abs(len(seen["cheap"]) / 2000 - rate) < 0.025
        else:
            assert seen["cheap"] == set()
    # The paused stratum counts as sampling skips; no stratum value becomes a label.
    assert count(registry, "evalstream_events_skipped_total", reason="sampling") >= 2000
    names = {s.name: s.labels for m in registry.collect() for s in m.samples}
    assert not any("acme" in labels.values() for labels in names.values())


async def test_strata_by_app_and_by_topic() -> None:
    def one(strata: dict[str, Any]) -> dict[str, Any]:
        return {**route(strata, sample_rate=0.0), "evaluators": [{"evaluator": "unit_scripted"}]}

    by_app, _ = make(one({"by": "app", "rates": {"bot": 1.0}}))
    assert [r.sample_rate for r in await by_app.evaluate(ev(1, app="bot"), topic="traces")] == [
        1.0]
    assert await by_app.evaluate(ev(1, app="other"), topic="traces") == []
    # An attribute called "app" is not the field.
    named_app = TraceEvent(event_id="e1", trace_id="t1", app="x", attributes={"app": "bot"})
    assert await by_app.evaluate(named_app, topic="traces") == []
    by_topic, _ = make(one({"by": "topic", "rates": {"audit": 1.0}}),
                       inputs=[{"topic": "traces"}, {"topic": "audit"}])
    assert len(await by_topic.evaluate(ev(1), topic="audit")) == 1
    assert await by_topic.evaluate(ev(1), topic="traces") == []


async def test_weighted_pass_rate_recovers_the_population_rate_over_mixed_strata() -> None:
    # A large tenant sampled at 5%, a small one at 100%, the rest at 20%, each with its own
    # true pass rate. The raw share of passed results is pulled towards the small tenant,
    # sampled 20 times as densely; weighting each by 1/sample_rate (what the weighted
    # counter does) recovers the population's. Fixed ids: the same figures every run.
    pipeline, registry = make(route({"by": "tenant", "rates": {"big": 0.05, "small": 1.0}}))
    population = {"big": (20_000, 0.9), "small": (600, 0.2), "rest": (3000, 0.6)}
    passed_true = total = 0
    offset = 0
    for tenant, (n, pass_rate) in population.items():
        fails = round(n * (1 - pass_rate))
        for i in range(n):
            # Interleave fails through the ids so no fraction range is all fails.
            output = "fail" if (i * 7919) % n < fails else "ok"
            await pipeline.evaluate(ev(offset + i, output, tenant=tenant), topic="traces")
        passed_true += n - fails
        total += n
        offset += n
    truth = passed_true / total

    def share(name: str) -> float:
        labels = {"route": "support", "evaluator": "cheap"}
        p = count(registry, name, **labels, outcome="passed")
        return p / (p + count(registry, name, **labels, outcome="failed"))

    weighted = share("evalstream_evaluations_weighted_total")
    raw = share("evalstream_evaluations_total")
    assert abs(weighted - truth) < 0.02, (weighted, truth)
    assert abs(raw - truth) > 0.1, (raw, truth)  # what 1/rate weighting corrects


async def test_squared_weights_give_kish_effective_n_and_labels_are_weighted() -> None:
    # The Prometheus rules' Wilson bounds use n_eff = (sum w)^2 / sum w^2 over a series:
    # the worker must count both sums per outcome, and weight labels as it weights
    # outcomes. 1,000 events at rate 1 and 100 at rate 0.01 (weight 100): n = 1,100, but
    # n_eff is about 121, the sample size the mixed pass rate really has.
    labels = {"evaluator": "unit_labels", "name": "topic"}
    pipeline, registry = make({**route({"by": "tenant", "rates": {"rare": 0.01}},
                                       sample_rate=1.0), "evaluators": [labels]})
    results = []
    for i in range(1000):
        results += await pipeline.evaluate(ev(i, "bill" if i % 3 else "x", tenant="common"),
                                           topic="traces")
    rare = 0
    for i in range(1000, 100_000):
        got = await pipeline.evaluate(ev(i, "bill" if i % 3 else "x", tenant="rare"),
                                      topic="traces")
        results += got
        rare += len(got)
        if rare == 100:
            break
    rates = [r.sample_rate for r in results]
    assert rates.count(1.0) == 1000
    assert rates.count(0.01) == 100
    series = {"route": "support", "evaluator": "topic", "outcome": "labelled"}
    weight = count(registry, "evalstream_evaluations_weighted_total", **series)
    squared = count(registry, "evalstream_evaluations_weight_squared_total", **series)
    assert weight == pytest.approx(sum(1 / r for r in rates))
    assert squared == pytest.approx(sum(1 / r**2 for r in rates))
    assert weight**2 / squared == pytest.approx(121.0, abs=1.0)
    assert count(registry, "evalstream_evaluations_total", **series) == 1100
    # Labels: weighted by the same 1/rate, per (collapsed) label.
    for label in ("billing", "other"):
        shown = [r for r in results if (r.label == "billing") == (label == "billing")]
        assert count(registry, "evalstream_labels_weighted_total", route="support",
                     evaluator="topic", label=label) == pytest.approx(
            sum(1 / r.sample_rate for r in shown))


def test_max_rate_includes_the_highest_stratum() -> None:
    pipeline, _ = make(route({"by": "tenant", "rates": {"tiny-co": 0.9}}, sample_rate=0.01),
                       sampling={"rate": 0.5})
    assert pipeline.max_rate == 0.5 * 0.9
    assert sum(pipeline.may_sample(f"t{i}") for i in range(4000)) / 4000 == pytest.approx(
        0.45, abs=0.03)
    plain, _ = make(route(None, sample_rate=0.01), sampling={"rate": 0.5})
    assert plain.max_rate == 0.5 * 0.01


async def test_canaries_follow_their_stratum_only_when_it_is_off() -> None:
    pipeline, registry = make(route({"by": "tenant", "rates": {"paused": 0.0, "acme": 0.001}},
                                    sample_rate=0.0))
    listed = await pipeline.evaluate(ev(1, tenant="acme", **CANARY), topic="traces")
    assert [(r.canary, r.sample_rate) for r in listed] == [(True, 1.0), (True, 1.0)]
    assert await pipeline.evaluate(ev(2, tenant="paused", **CANARY), topic="traces") == []
    assert await pipeline.evaluate(ev(3, tenant="other", **CANARY), topic="traces") == []
    assert count(registry, "evalstream_events_skipped_total", reason="sampling") == 2


def test_error_results_of_every_stratum_are_bounded() -> None:
    # The request-size check sizes the error results of every rate the route can publish:
    # per evaluator, the one whose rate is the longest in JSON (its own or a stratum's).
    pipeline, _ = make(route({"by": "tenant", "rates": {"a": 0.123456789, "off": 0.0}}))
    rates = [(r.evaluator, r.sample_rate) for r in pipeline.largest_error_results()]
    assert rates == [("cheap", 0.123456789), ("costly", 0.123456789 * 0.5)]


def test_error_results_stay_one_per_evaluator_however_many_strata() -> None:
    # With one error result per stratum, 10,000 strata x 2 evaluators took ~3.6 s of
    # start-up to size (checked: this test fails without the per-evaluator bound).
    rates = {f"t{i}": round(0.1 + i / 1e4, 4) for i in range(1000)}
    rates["long"] = 0.123456789
    pipeline, _ = make(route({"by": "tenant", "rates": rates}))
    largest = pipeline.largest_error_results()
    assert [(r.evaluator, r.sample_rate) for r in largest] == [
        ("cheap", 0.123456789), ("costly", 0.123456789 * 0.5)]


def test_error_results_skip_the_rates_of_0_a_route_with_strata_may_keep() -> None:
    # A route at 0 with a live stratum is valid (test_a_route_at_0_with_a_live_stratum_...);
    # a result at rate 0 is not (EvalResult.sample_rate > 0), so sizing one would fail the
    # start-up (checked: this fails when rates of 0 are not skipped).
    pipeline, _ = make(route({"by": "tenant", "rates": {"a": 0.5}}, sample_rate=0.0))
    assert [(r.evaluator, r.sample_rate) for r in pipeline.largest_error_results()] == [
        ("cheap", 0.5), ("costly", 0.25)]
    off, _ = make(route({"by": "tenant", "rates": {"a": 0.0}}, sample_rate=0.0))
    assert off.largest_error_results() == []


def test_error_results_size_the_routes_own_rate_when_it_is_the_longest() -> None:
    # The route's own evaluations count as much as its strata's (checked: this fails when
    # only the strata's are looked at).
    pipeline, _ = make(route({"by": "tenant", "rates": {"a": 0.5}}, sample_rate=0.123456789))
    assert [(r.evaluator, r.sample_rate) for r in pipeline.largest_error_results()] == [
        ("cheap", 0.123456789), ("costly", 0.123456789 * 0.5)]


def test_strata_are_bounded() -> None:
    # Each stratum's evaluations are built at start-up: the documented bound is 10,000.
    rates = {f"t{i}": 0.5 for i in range(10_000)}
    assert len(Strata(by="tenant", rates=rates).rates) == 10_000
    with pytest.raises(ValidationError, match="at most 10000"):
        Strata(by="tenant", rates={**rates, "one-more": 0.5})


# --- No silent filters -----------------------------------------------------------------------

OTLP = {"topic": "spans", "format": "otlp_json"}


def test_otlp_decoders_carry_the_strata_attribute() -> None:
    s = settings(inputs=[OTLP, {"topic": "traces"}], routes=[
        route({"by": "tenant", "rates": {"a": 0.5}}, match={"topic": ["spans"]}),
        {**route({"by": "app", "rates": {"a": 0.5}}), "name": "other"}])
    params = [registry.params_for(spec, where="") for r in s.routes for spec in r.evaluators]
    assert attributes_read(s, params) == {"spans": ("tenant",), "traces": ()}


def test_strata_by_a_field_the_inputs_never_set_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # No format leaves `app` unset today; were one to, the strata would never apply.
    monkeypatch.setitem(NEVER_SET, "otlp_json", NEVER_SET["otlp_json"] | {"app"})
    s = settings(inputs=[OTLP], routes=[route({"by": "app", "rates": {"bot": 1.0}})])
    with pytest.raises(ConfigError, match=r"routes\[0\] \(support\)\.strata\.by: the route's "
                                          r"inputs \(spans: otlp_json\) never set 'app'"):
        check_fields_provided(s, Pipeline(s, JUDGES, Metrics(CollectorRegistry())))
    s = settings(inputs=[OTLP], routes=[route({"by": "tenant", "rates": {"a": 1.0}})])
    check_fields_provided(s, Pipeline(s, JUDGES, Metrics(CollectorRegistry())))


def warnings_for(*routes: dict[str, Any], **sections: Any) -> list[str]:
    s = settings(routes=list(routes), **sections)
    return config_warnings(s, Pipeline(s, JUDGES, Metrics(CollectorRegistry())))


def test_strata_that_change_nothing_are_said() -> None:
    [said] = warnings_for(route({"by": "tenant", "rates": {"a": 0.2, "b": 0.2}}))
    assert said.startswith("routes[0] (support).strata: every rate listed equals the route's "
                           "sample_rate (0.2)")
    assert warnings_for(route({"by": "tenant", "rates": {"a": 0.2, "b": 0.3}})) == []


def test_strata_by_a_topic_the_route_does_not_read_are_said() -> None:
    inputs = [{"topic": "traces"}, {"topic": "audit"}]
    strata = {"by": "topic", "rates": {"traces": 1.0, "audti": 0.5}}
    [said] = warnings_for(route(strata), inputs=inputs)
    assert said == ("routes[0] (support).strata.rates: ['audti'] is no topic the route reads "
                    "(its inputs: ['audit', 'traces']): never applied")
    assert warnings_for(route({**strata, "rates": {"traces": 1.0, "audit": 0.5}}),
                        inputs=inputs) == []
    # ... by the route's inputs: those its match.topic names.
    [said] = warnings_for(route({**strata, "rates": {"traces": 1.0, "audit": 0.5}},
                                match={"topic": ["traces"]}), inputs=inputs)
    assert "['audit'] is no topic the route reads (its inputs: ['traces'])" in said


def test_strata_values_the_routes_match_refuses_are_said() -> None:
    # As a topic the route does not read: an app (or attribute value) its match refuses
    # never reaches it, so that stratum's rate is never applied, silently until this
    # warning (checked: no warning without it).
    [said] = warnings_for(route({"by": "app", "rates": {"chat": 1.0, "caht": 0.5}},
                                match={"app": ["chat", "search"]}))
    assert said == ("routes[0] (support).strata.rates: ['caht'] is no value the route's "
                    "match.app accepts (['chat', 'search']): never applied")
    [said] = warnings_for(route({"by": "tenant", "rates": {"acme": 1.0, "globex": 0.5}},
                                match={"attributes": {"tenant": "acme"}}))
    assert said == ("routes[0] (support).strata.rates: ['globex'] is no value the route's "
                    "match.attributes.tenant accepts (['acme']): never applied")
    # Values the match accepts, any value ("*"), or no condition on it: nothing to say.
    for match in ({"app": ["chat", "caht"]}, {"attributes": {"app": "*"}}, {}):
        assert warnings_for(route({"by": "app", "rates": {"chat": 1.0, "caht": 0.5}},
                                  match=match)) == []
    assert warnings_for(route({"by": "tenant", "rates": {"acme": 1.0, "b": 0.5}},
                              match={"attributes": {"tenant": ["acme", "b"]}})) == []
    assert warnings_for(route({"by": "tenant", "rates": {"acme": 1.0, "b": 0.5}},
                              match={"attributes": {"tenant": "*"}})) == []


def test_strata_values_a_prefix_match_refuses_are_said() -> None:
    # A prefix accepts the values starting with it: only the others are idle.
    [said] = warnings_for(route({"by": "app", "rates": {"checkout-eu": 1.0, "cart": 0.5}},
                                match={"app": ["checkout-*"]}))
    assert said == ("routes[0] (support).strata.rates: ['cart'] is no value the route's "
                    "match.app accepts (['checkout-*']): never applied")
    assert warnings_for(route({"by": "model", "rates": {"gpt-4o-mini-2024-07-18": 1.0,
                                                        "gpt-4o": 0.5}},
                              match={"attributes": {"model": ["gpt-4o", "gpt-4o-mini*"]}})) == []


def test_a_route_at_0_with_a_live_stratum_is_not_off() -> None:
    first = {**route({"by": "tenant", "rates": {"a": 0.5}}, sample_rate=0.0),
             "match": {"app": ["x"]}}
    rest = {**route(None), "name": "rest"}
    assert warnings_for(first, rest) == []
    assert "turns the route off" in warnings_for({**first, "strata": None}, rest)[0]
    off = warnings_for(route({"by": "tenant", "rates": {"a": 0.0}}, sample_rate=0.0))
    assert any("evaluates nothing" in said for said in off)


def test_a_yaml_route_with_strata_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("routes:\n  - name: support\n    sample_rate: 0.01\n    strata:\n"
                    "      by: tenant\n      rates: {acme: 0.001, tiny-co: 1.0}\n"
                    "    evaluators: [{evaluator: refusal}]\n", encoding="utf-8")
    strata = load_settings(path).routes[0].strata
    assert strata is not None
    assert (strata.by, strata.rates) == ("tenant", {"acme": 0.001, "tiny-co": 1.0})
