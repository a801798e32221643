"""No silent filters: a config that loads but can never route (or score) an event is refused
at start-up, naming the field and why; what only the data can tell is left to run time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from evalstream.app.checks import check_fields_provided, check_settings
from evalstream.app.config_warnings import config_warnings
from evalstream.app.intake import Intake
from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import attributes_read
from evalstream.app.worker import Worker
from evalstream.cli import main
from evalstream.config import InputTopic, load_settings
from evalstream.config.judges import BuiltinJudgeConfig, CascadeJudgeConfig, judges_reached
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.events import RawRecord, TraceEvent, dump_json
from evalstream.formats import decoder_for
from evalstream.judges.registry import build_judges
from evalstream.metrics import Metrics
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.pipeline_doubles import JUDGES
from tests.unit.pipeline_doubles import settings as pipeline_settings


def route(name: str, match: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "match": match or {}, "evaluators": [{"evaluator": "refusal"}],
            **extra}


@pytest.mark.parametrize(("match", "field"), [
    ({"app": []}, "app"),
    ({"topic": []}, "topic"),
    ({"attributes": {"tenant": []}}, "attributes.tenant"),
])
def test_an_empty_list_of_accepted_values_is_refused(match: dict[str, Any], field: str) -> None:
    # Before: loaded, and the route never matched an event (nothing is in an empty list).
    with pytest.raises(ConfigError, match=rf"routes\.0\.match.*{field}: an empty list accepts no"):
        load_settings(None, routes=[route("r", match)])


@pytest.mark.parametrize(("earlier", "later"), [
    ({}, {"app": ["support"]}),  # an empty match accepts everything
    ({"app": ["a", "b"]}, {"app": ["a"], "topic": ["llm.traces"]}),
    ({"topic": ["llm.traces"]}, {"topic": ["llm.traces"], "requires": ["output"]}),
    ({"attributes": {"env": "*"}}, {"attributes": {"env": ["prod", "dev"]}}),
    ({"attributes": {"env": ["prod", "dev"]}}, {"attributes": {"env": "prod", "tier": "*"}}),
    ({"requires": ["output"]}, {"requires": ["output", "input"]}),
])
def test_a_route_shadowed_by_an_earlier_one_is_refused(earlier: dict[str, Any],
                                                       later: dict[str, Any]) -> None:
    routes = [route("wide", earlier), route("narrow", later)]
    with pytest.raises(ConfigError, match=r"routes\[1\] \(narrow\) is unreachable.*"
                                          r"routes\[0\] \(wide\)"):
        load_settings(None, routes=routes)
    # The same routes are fine in the other order, or when every matching route runs.
    load_settings(None, routes=routes[::-1])
    load_settings(None, routes=routes, worker={"routing": "all"})


@pytest.mark.parametrize(("earlier", "later"), [
    ({"app": ["a"]}, {}),
    ({"app": ["a"]}, {"app": ["a", "b"]}),
    ({"topic": ["x"]}, {"app": ["a"]}),  # from another topic the later one still matches
    ({"attributes": {"env": "prod"}}, {"attributes": {"env": "*"}}),
    ({"attributes": {"env": "prod"}}, {"attributes": {"env": ["prod", "dev"]}}),
    ({"attributes": {"env": "prod"}}, {"attributes": {"tier": "gold"}}),
    ({"requires": ["input"]}, {"requires": ["output"]}),
])
def test_routes_that_can_each_get_events_are_accepted(earlier: dict[str, Any],
                                                      later: dict[str, Any]) -> None:
    load_settings(None, routes=[route("first", earlier), route("second", later)])


# --- OTLP decoders carry the attributes the configuration reads ----------------------------

def otlp_batch(span_attributes: dict[str, str], resource: dict[str, str]) -> bytes:
    def kv(attrs: dict[str, str]) -> list[dict[str, Any]]:
        return [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]

    messages = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m-1",
        "gen_ai.input.messages": dump_json(
            [{"role": "user", "parts": [{"type": "text", "content": "Where is my order?"}]}]
        ).decode(),
        "gen_ai.output.messages": dump_json(
            [{"role": "assistant", "parts": [{"type": "text", "content": "It ships today."}],
              "finish_reason": "stop"}]).decode(),
    }
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "2", "name": "chat m-1",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2",
            "attributes": kv({**messages, **span_attributes})}
    return dump_json({"resourceSpans": [{
        "resource": {"attributes": kv({"service.name": "shop", **resource})},
        "scopeSpans": [{"spans": [span]}]}]})


OTLP_INPUT = {"topic": "spans", "format": "otlp_json"}


def test_otlp_decoders_carry_attributes_read_by_routes_and_results() -> None:
    settings = pipeline_settings(
        inputs=[OTLP_INPUT],
        routes=[route("acme", {"attributes": {"tenant": "acme"}}),
                route("rest", {"topic": ["spans"], "requires": ["output"]})],
        results={"attributes": ["region", "model"]})
    metrics = Metrics(CollectorRegistry())
    pipeline = Pipeline(settings, JUDGES, metrics)
    intake = Intake(settings, pipeline, metrics)
    record = RawRecord("spans", 0, 0, otlp_batch({"tenant": "acme"}, {"region": "eu"}))
    [event] = intake.decode(record).events
    # Before: OTLP events kept only the decoder's fixed attributes: the route matching
    # `tenant` never matched (every event went to "rest") and `region` was never copied.
    assert event.attributes["tenant"] == "acme"  # from the span
    assert event.attributes["region"] == "eu"  # from the resource
    assert event.attributes["model"] == "m-1"  # a name the decoder sets itself, unchanged
    [planned] = pipeline.plan(event, "spans")
    assert planned.bound.route == "acme"


def test_attributes_read_per_input() -> None:
    settings = pipeline_settings(
        inputs=[OTLP_INPUT, {"topic": "other", "format": "otlp_proto"}],
        routes=[route("scoped", {"topic": ["spans"], "attributes": {"tenant": "*"}},
                      evaluators=[{"evaluator": "topic_adherence",
                                   "params": {"criteria_attribute": "scope"}}]),
                route("all", {"attributes": {"tier": "gold"}})],
        results={"attributes": ["region"]})
    params = [registry.params_for(spec, where="") for r in settings.routes
              for spec in r.evaluators]
    assert attributes_read(settings, params) == {
        "spans": ("region", "tenant", "scope", "tier"), "other": ("region", "tier")}
    with pytest.raises(ValueError, match="one per evaluator"):
        attributes_read(settings, params[:-1])


def test_a_criteria_attribute_is_carried_to_the_evaluator() -> None:
    topic = InputTopic(topic="spans", format="otlp_json", attribute_map={"tenant": "org.id"})
    value = otlp_batch({"scope": "orders only", "org.id": "o-1", "tenant": "ignored"}, {})
    record = RawRecord("spans", 0, 0, value)
    [plain] = decoder_for(topic)(record).events
    assert "scope" not in plain.attributes
    [event] = decoder_for(topic, ["scope", "tenant"])(record).events
    assert event.attributes["scope"] == "orders only"
    # attribute_map still decides where a name it maps is read from.
    assert event.attributes["tenant"] == "o-1"


# --- Fields a route needs that its inputs' formats never set ------------------------------

FLAT_INPUT = {"topic": "traces", "format": "flat_json"}
SIMILARITY = [{"evaluator": "text_similarity"}]


def fields_check(inputs: list[dict[str, Any]], routes: list[dict[str, Any]]) -> None:
    settings = pipeline_settings(inputs=inputs, routes=routes)
    check_fields_provided(settings, Pipeline(settings, JUDGES, Metrics(CollectorRegistry())))


@pytest.mark.parametrize(("match", "evaluators", "needle"), [
    ({"requires": ["output", "reference"]}, None,
     r"routes\[0\] \(r\)\.match\.requires: the route's inputs \(spans: otlp_json\) never "
     r"set 'reference'"),
    ({}, SIMILARITY, r"routes\[0\] \(r\) evaluator 'text_similarity' needs reference"),
    ({}, [{"evaluator": "classifier", "params": {
        "labels": {"same": "matches", "different": "does not"}, "fields": ["reference"]}}],
     r"evaluator 'classifier' needs reference, which .* never set: it would skip every"),
])
def test_a_route_needing_a_field_otlp_never_sets_is_refused(
        match: dict[str, Any], evaluators: list[dict[str, Any]] | None, needle: str) -> None:
    # Before: loaded; the route never matched, or its evaluator skipped every event.
    r = route("r", match, **({"evaluators": evaluators} if evaluators else {}))
    with pytest.raises(ConfigError, match=needle):
        fields_check([OTLP_INPUT], [r])
    # Restricted to the OTLP input, it is refused even beside a flat_json input...
    with pytest.raises(ConfigError, match=needle.split(":")[0]):
        fields_check([OTLP_INPUT, FLAT_INPUT], [{**r, "match": {**match, "topic": ["spans"]}}])
    # ... while a route that also reads flat_json (whose messages may hold any field) loads.
    fields_check([OTLP_INPUT, FLAT_INPUT], [r])


def test_a_need_any_input_field_can_meet_is_accepted() -> None:
    fields_check([OTLP_INPUT], [route("r", {"requires": ["system_prompt", "context"]}, evaluators=[
        {"evaluator": "classifier", "params": {
            "labels": {"a": "one", "b": "two"}, "fields": ["reference", "conversation"]}},
        {"evaluator": "role_adherence", "params": {"role_from_system_prompt": True}}])])


def test_check_config_refuses_a_field_its_inputs_never_set() -> None:
    settings = pipeline_settings(
        inputs=[OTLP_INPUT], routes=[route("r", evaluators=[{**SIMILARITY[0], "judge": "llm"}])],
        judges={"llm": {"type": "openai", "base_url": "http://127.0.0.1:9", "model": "m"}})
    with pytest.raises(ConfigError, match="needs reference"):
        check_settings(settings)


# --- What may be meant but does nothing: said at start-up, not refused --------------------

def warnings_for(**sections: Any) -> list[str]:
    settings = pipeline_settings(**sections)
    return config_warnings(settings, Pipeline(settings, JUDGES, Metrics(CollectorRegistry())))


def test_sampling_that_evaluates_nothing_is_said() -> None:
    # A rate of 0 is a way to pause judge spend, so it is said, not refused.
    [said] = warnings_for(sampling={"rate": 0.0})
    assert said.startswith("sampling: sampling.rate (0) x each route's sample_rate is 0")
    routes = [route("a", {"app": ["x"]}, sample_rate=0.0), route("b", sample_rate=0.0)]
    assert "evaluates nothing" in warnings_for(routes=routes)[0]
    assert warnings_for(routes=[route("b", {"app": ["y"]}, sample_rate=0.01), routes[0]]) == []


def test_watched_labels_of_no_evaluator_are_said() -> None:
    sentiment = [route("r", evaluators=[{"evaluator": "sentiment", "name": "mood"}])]
    [said] = warnings_for(routes=sentiment, drift={"watch_labels": {"moood": "negative"}})
    assert said.startswith("drift.watch_labels: ['moood'] name no evaluator")
    assert warnings_for(routes=sentiment, drift={"watch_labels": {"mood": "negative"}}) == []
    # The defaults (topic, sentiment), written out as the example config does, are quiet.
    assert warnings_for(routes=sentiment, drift={"watch_labels": {
        "topic": "other", "sentiment": "negative"}}) == []
    assert warnings_for(routes=sentiment, drift={"enabled": False,
                                                 "watch_labels": {"moood": "negative"}}) == []


def test_reasons_for_failures_of_an_evaluator_that_never_fails_are_said() -> None:
    never = {"evaluator": "sentiment", "reasons": "failures"}
    [said] = warnings_for(routes=[route("r", evaluators=[never])])
    assert said.startswith("routes[0] (r) evaluator 'sentiment': reasons: failures never")
    fails = {**never, "params": {"fail_labels": ["negative"]}}
    assert warnings_for(routes=[route("r", evaluators=[fails])]) == []
    assert warnings_for(routes=[route("r", evaluators=[{**never, "reasons": "always"}])]) == []


def test_the_worker_logs_each_warning_once_and_check_config_prints_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = pipeline_settings(sampling={"rate": 0.0})
    with capture_logs() as logs:
        Worker(settings, registry=CollectorRegistry(), judges=JUDGES, source=MemorySource([]),
               sink=MemorySink())
    [logged] = [e for e in logs if e["event"] == "config_does_nothing"]
    assert logged["log_level"] == "warning"
    assert "evaluates nothing" in logged["warning"]
    path = tmp_path / "c.yaml"
    path.write_text("sampling: {rate: 0}\n", encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "evalstream: warning: sampling: " in capsys.readouterr().err


def test_an_otlp_input_that_evaluates_no_span_kind_is_refused() -> None:
    # Before: loaded, and every span was skipped as not_llm.
    for kinds in ([], [" "]):
        with pytest.raises(ConfigError, match=r"inputs\.0.*llm_operations: no span kind"):
            load_settings(None, inputs=[{**OTLP_INPUT, "llm_operations": kinds}])
    load_settings(None, inputs=[{**OTLP_INPUT, "llm_operations": ["invoke_agent"]}])


def test_a_route_turned_off_before_others_is_said() -> None:
    off = route("paused", {"app": ["x"]}, sample_rate=0.0)
    [said] = warnings_for(routes=[off, route("rest")])
    assert said.startswith("routes[0] (paused).sample_rate: 0 turns the route off")
    assert warnings_for(routes=[route("rest", {"app": ["y"]}), off]) == []  # nothing after it
    assert warnings_for(routes=[off, route("rest")], worker={"routing": "all"}) == []


def test_judges_no_evaluator_uses_are_said() -> None:
    llm = {"type": "openai", "base_url": "http://127.0.0.1:9", "model": "m", "deadline_s": 10,
           "timeout_s": 5}
    judges = {"big": llm, "small": llm, "spare": llm,
              "inner": {"type": "cascade", "first": "builtin", "then": "big"},
              "outer": {"type": "cascade", "first": "small", "then": "inner"}}
    uses = [route("r", evaluators=[{"evaluator": "refusal", "judge": "outer"}])]
    settings = pipeline_settings(routes=uses, judges=judges)
    metrics = Metrics(CollectorRegistry())
    built = build_judges(settings.judges, metrics)
    assert config_warnings(settings, Pipeline(settings, built, metrics)) == [
        "judges: ['spare'] defined, but no evaluator names them (nor a cascade in use): they "
        "are never asked"]


def _label_warnings(labels: dict[str, str], judge: str, judges: dict[str, Any],
                    evaluator: str = "classifier") -> list[str]:
    params = ({"labels": labels} if evaluator == "classifier" else {"topics": labels})
    uses = [route("r", evaluators=[{"evaluator": evaluator, "name": "intent", "judge": judge,
                                    "params": params}])]
    settings = pipeline_settings(routes=uses, judges=judges)
    metrics = Metrics(CollectorRegistry())
    built = build_judges(settings.judges, metrics)
    # Only these findings (the judges this evaluator does not use are said as unused).
    return [w for w in config_warnings(settings, Pipeline(settings, built, metrics))
            if not w.startswith("judges: ")]


def test_labels_an_llm_judge_answers_0_1_for_are_said_at_start_up() -> None:
    # Before: only the judge's runtime log at the first request (judge_options_not_first_token)
    # said that these labels turn its answers into JSON ones, probabilities 0/1.
    llm = {"type": "openai", "base_url": "http://127.0.0.1:9", "model": "m", "deadline_s": 10,
           "timeout_s": 5}
    judges = {"llm": llm, "never": {**llm, "logprobs": "never"},
              "cheap": {"type": "cascade", "first": "builtin", "then": "llm"},
              "cheap_never": {"type": "cascade", "first": "builtin", "then": "never"}}
    many = {"billing_refund": "money back", "needs-human": "escalate", "billing": "bills"}
    [said] = _label_warnings(many, "llm", judges)
    assert said == (
        "routes[0] (r) evaluator 'intent': its labels cannot be told apart by the first token "
        "(not one word each: ['billing_refund', 'needs-human']), so judge 'llm' asks for a "
        "JSON answer: probabilities are 0/1 (confidence always 1) and calibration metrics "
        "degenerate; use one-word labels (letters or digits, none a prefix of another) to "
        "keep probabilities, or accept it")
    # A cascade ending in the LLM judge: its escalations are answered so.
    [said] = _label_warnings(many, "cheap", judges)
    assert "judge 'llm' asks for a JSON answer" in said
    # One word each, but one a prefix of another: the judge's predicate refuses them too.
    [said] = _label_warnings({"account": "a", "accounting": "b"}, "llm", judges)
    assert "(one the prefix of another: ['account/accounting'])" in said
    # Topics are labels too (and "other" is added to them).
    [said] = _label_warnings({"billing_refund": "x", "shipping": "y"}, "llm", judges,
                             evaluator="topic")
    assert "not one word each: ['billing_refund']" in said
    # Quiet: one-word labels; a judge that never asks for logprobs (JSON whatever the
    # labels); the builtin judge, which scores topics itself.
    assert _label_warnings({"billing": "x", "account": "y"}, "llm", judges) == []
    assert _label_warnings(many, "never", judges) == []
    assert _label_warnings(many, "cheap_never", judges) == []
    assert _label_warnings({"billing_refund": "x"}, "builtin", judges, evaluator="topic") == []


async def test_events_without_the_sampling_key_are_said_once() -> None:
    # No format is certain never to set a session id, so only the traffic can tell that
    # `sampling.key: session_id` samples each event on its own: said once, when it does.
    settings = pipeline_settings(sampling={"key": "session_id"},
                                 routes=[route("r", evaluators=[{"evaluator": "unit_scripted"}])])
    pipeline = Pipeline(settings, JUDGES, Metrics(CollectorRegistry()))
    with capture_logs() as logs:
        await pipeline.evaluate(TraceEvent(event_id="a", session_id="s1", output="x"), topic="t")
        assert not logs
        for i in range(3):
            await pipeline.evaluate(TraceEvent(event_id=f"b{i}", output="x"), topic="t")
    [said] = [e for e in logs if e["event"] == "sampling_key_missing"]
    assert said["key"] == "session_id"
    assert said["log_level"] == "warning"


@pytest.mark.parametrize(("spec", "said"), [
    ({"evaluator": "topic_adherence",
      "params": {"criteria": "Orders and billing.", "criteria_attribute": "scope"}},
     "params.criteria_attribute: never read, as criteria is set"),
    ({"evaluator": "role_adherence",
      "params": {"chatbot_role": "A shop assistant.", "role_from_system_prompt": True}},
     "params.role_from_system_prompt: no effect, as chatbot_role is set"),
])
def test_params_idle_beside_the_one_that_wins_are_said(spec: dict[str, Any], said: str) -> None:
    [warning] = warnings_for(routes=[route("r", evaluators=[spec])])
    assert warning.startswith(f"routes[0] (r) evaluator {spec['evaluator']!r}: {said}")
    alone = {**spec, "params": dict(list(spec["params"].items())[:1])}
    assert warnings_for(routes=[route("r", evaluators=[alone])]) == []


@pytest.mark.parametrize("fmt", ["otlp_logs_json", "otlp_logs_proto"])
def test_a_route_needing_reference_from_a_logs_input_is_refused(fmt: str) -> None:
    # Log events carry no expected answer either: refused at start-up like OTLP spans.
    logs_input = {"topic": "logs", "format": fmt}
    with pytest.raises(ConfigError, match=rf"the route's inputs \(logs: {fmt}\) never set "
                                          r"'reference'"):
        fields_check([logs_input], [route("r", {"requires": ["output", "reference"]})])
    fields_check([logs_input, FLAT_INPUT], [route("r", {"requires": ["output", "reference"]})])


def test_a_logs_input_carries_attributes_read_by_routes() -> None:
    settings = pipeline_settings(
        inputs=[{"topic": "logs", "format": "otlp_logs_json"}],
        routes=[route("acme", {"attributes": {"tenant": "acme"}})])
    metrics = Metrics(CollectorRegistry())
    pipeline = Pipeline(settings, JUDGES, metrics)
    intake = Intake(settings, pipeline, metrics)
    kv = [{"key": k, "value": {"stringValue": v}} for k, v in (
        ("gen_ai.operation.name", "chat"), ("tenant", "acme"),
        ("gen_ai.input.messages",
         '[{"role": "user", "parts": [{"type": "text", "content": "q"}]}]'),
        ("gen_ai.output.messages",
         '[{"role": "assistant", "parts": [{"type": "text", "content": "a"}]}]'))]
    value = dump_json({"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [{
        "eventName": "gen_ai.client.inference.operation.details", "traceId": "ab" * 16,
        "spanId": "cd" * 8, "attributes": kv}]}]}]})
    [event] = intake.decode(RawRecord("logs", 0, 0, value)).events
    assert (event.input, event.output, event.attributes["tenant"]) == ("q", "a", "acme")
    [planned] = pipeline.plan(event, "logs")
    assert planned.bound.route == "acme"


@pytest.mark.timeout(10)
def test_judges_reached_walks_nested_cascades_once_and_ends_on_a_cycle() -> None:
    judges: dict[str, Any] = {
        "outer": CascadeJudgeConfig(first="builtin", then="inner"),
        "inner": CascadeJudgeConfig(first="small", then="large"),
        "builtin": BuiltinJudgeConfig(), "unused": BuiltinJudgeConfig(),
        # A cycle is refused when the judges are built; the walk must still end.
        "a": CascadeJudgeConfig(then="b"), "b": CascadeJudgeConfig(then="a"),
    }
    assert judges_reached(judges, ["outer"]) == {"outer", "builtin", "inner", "small", "large"}
    assert judges_reached(judges, ["a"]) == {"a", "b", "builtin"}
    assert judges_reached(judges, []) == set()


def test_every_route_turned_off_before_the_last_is_said_but_not_when_all_are() -> None:
    on, off = route("on", {"app": ["a"]}), route("paused", {"app": ["x"]}, sample_rate=0.0)
    [said] = warnings_for(routes=[on, off, route("rest")])
    assert said.startswith("routes[1] (paused).sample_rate: 0 turns the route off")
    # Every route at 0: the one finding that nothing is evaluated, not one per route.
    [said] = warnings_for(routes=[off, route("rest", sample_rate=0.0)])
    assert said.startswith("sampling: ")
