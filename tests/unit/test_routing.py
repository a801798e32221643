"""Routing rules: app, topic, attributes, required fields; first or all matches."""

from __future__ import annotations

from evalstream.config import EvaluatorSpec, MatchRule, Route
from evalstream.events import TraceEvent
from evalstream.routing import Router, matches

SPEC = [EvaluatorSpec(evaluator="refusal")]


def event(**kw: object) -> TraceEvent:
    return TraceEvent.model_validate({"event_id": "e", "output": "answer", **kw})


def test_empty_rule_matches_everything() -> None:
    assert matches(MatchRule(), event(), "any")


def test_app_and_topic() -> None:
    rule = MatchRule(app=["support"], topic=["traces"])
    assert matches(rule, event(app="support"), "traces")
    assert not matches(rule, event(app="sales"), "traces")
    assert not matches(rule, event(app="support"), "other")
    assert not matches(rule, event(), "traces")  # no app at all


def test_attributes_exact_list_and_presence() -> None:
    rule = MatchRule(attributes={"env": ["prod", "staging"], "model": "*", "tier": "pro"})
    ok = event(attributes={"env": "prod", "model": "m", "tier": "pro"})
    assert matches(rule, ok, "t")
    assert not matches(rule, event(attributes={"env": "dev", "model": "m", "tier": "pro"}), "t")
    assert not matches(rule, event(attributes={"env": "prod", "tier": "pro"}), "t")
    assert not matches(rule, event(attributes={"env": "prod", "model": "m", "tier": "x"}), "t")


def test_requires_non_empty_fields() -> None:
    rule = MatchRule(requires=["system_prompt", "context"])
    assert matches(rule, event(system_prompt="be nice", context=["doc"]), "t")
    assert not matches(rule, event(system_prompt="   ", context=["doc"]), "t")
    assert not matches(rule, event(system_prompt="be nice"), "t")


def test_first_and_all_modes() -> None:
    routes = [
        Route(name="support", match=MatchRule(app=["support"]), evaluators=SPEC),
        Route(name="prod", match=MatchRule(attributes={"env": "prod"}), evaluators=SPEC),
        Route(name="default", evaluators=SPEC),
    ]
    e = event(app="support", attributes={"env": "prod"})
    assert Router(routes, "first").route(e, "t") == [0]
    assert Router(routes, "all").route(e, "t") == [0, 1, 2]
    assert Router(routes, "first").route(event(), "t") == [2]
    assert Router(routes[:2], "all").route(event(), "t") == []
