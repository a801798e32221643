"""Prefix match values (``gpt-4o-mini*``, ``checkout-*``): routing, the shadowed-route check,
refused glob syntax, and the start-up checks and warnings that reason about match values."""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.app.checks import check_route_topics
from evalstream.app.reach import route_inputs
from evalstream.config import Accepted, EvaluatorSpec, MatchRule, Route, load_settings
from evalstream.errors import ConfigError
from evalstream.events import TraceEvent
from evalstream.routing import Router, matches
from tests.unit.test_config_reach import (
    test_a_route_shadowed_by_an_earlier_one_is_refused as check_shadowed,
)

SPEC = [EvaluatorSpec(evaluator="refusal")]


def event(**kw: object) -> TraceEvent:
    return TraceEvent.model_validate({"event_id": "e", "output": "answer", **kw})


def route(name: str, match: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "match": match or {}, "evaluators": [{"evaluator": "refusal"}]}


# --- matching ------------------------------------------------------------------------------

def test_a_trailing_star_matches_by_prefix_on_app_topic_and_attributes() -> None:
    # What real traces carry: the response model, a service name per region.
    rule = MatchRule(app=["checkout-*"], topic=["llm.*"],
                     attributes={"model": "gpt-4o-mini*"})
    traced = event(app="checkout-eu", attributes={"model": "gpt-4o-mini-2024-07-18"})
    assert matches(rule, traced, "llm.traces")
    assert matches(rule, event(app="checkout-", attributes={"model": "gpt-4o-mini"}), "llm.x")
    assert not matches(rule, event(app="checkout", attributes={"model": "gpt-4o-mini"}),
                       "llm.traces")  # the prefix is "checkout-", dash included
    assert not matches(rule, event(app="eu-checkout-eu", attributes={"model": "gpt-4o-mini"}),
                       "llm.traces")  # a prefix, not a substring
    assert not matches(rule, traced, "audit.traces")
    assert not matches(rule, event(app="checkout-eu", attributes={"model": "gpt-4o"}),
                       "llm.traces")
    assert not matches(rule, event(attributes={"model": "gpt-4o-mini"}), "llm.traces")  # no app


def test_exact_values_and_prefixes_mix_in_one_list() -> None:
    rule = MatchRule(app=["cart", "checkout-*"],
                     attributes={"model": ["gpt-4o", "gpt-4o-mini*"]})
    for app, model in (("cart", "gpt-4o"), ("checkout-us", "gpt-4o-mini-2024-07-18")):
        assert matches(rule, event(app=app, attributes={"model": model}), "t")
    # Exact values stay exact beside a prefix.
    assert not matches(rule, event(app="carts", attributes={"model": "gpt-4o"}), "t")
    assert not matches(rule, event(app="cart", attributes={"model": "gpt-4o-2024-08-06"}), "t")


def test_a_bare_star_means_present_for_app_and_attributes_alike() -> None:
    rule = MatchRule(app=["*"], attributes={"model": "*", "env": ["prod", "*"]})
    assert matches(rule, event(app="anything", attributes={"model": "m", "env": "dev"}), "t")
    assert not matches(rule, event(attributes={"model": "m", "env": "dev"}), "t")  # no app
    assert not matches(rule, event(app="a", attributes={"env": "dev"}), "t")  # no model
    assert matches(MatchRule(topic=["*"]), event(), "any.topic")


def test_the_router_uses_prefixes_in_first_and_all_modes() -> None:
    routes = [Route(name="mini", match=MatchRule(attributes={"model": "gpt-4o-mini*"}),
                    evaluators=SPEC),
              Route(name="gpt", match=MatchRule(attributes={"model": "gpt-*"}), evaluators=SPEC),
              Route(name="rest", evaluators=SPEC)]
    mini = event(attributes={"model": "gpt-4o-mini-2024-07-18"})
    assert Router(routes, "first").route(mini, "t") == [0]
    assert Router(routes, "all").route(mini, "t") == [0, 1, 2]
    assert Router(routes, "all").route(event(attributes={"model": "gpt-4o"}), "t") == [1, 2]
    assert Router(routes, "all").route(event(attributes={"model": "o1"}), "t") == [2]


def test_a_copied_rule_matches_on_its_own_values() -> None:
    # The parsed values are cached on the rule: a copy with other values must not reuse them.
    rule = MatchRule(app=["cart"], attributes={"model": "gpt-4o*"})
    assert matches(rule, event(app="cart", attributes={"model": "gpt-4o"}), "t")
    copy = rule.model_copy(update={"app": ["checkout-*"], "attributes": {"model": "o1*"}})
    assert matches(copy, event(app="checkout-eu", attributes={"model": "o1-mini"}), "t")
    assert not matches(copy, event(app="cart", attributes={"model": "gpt-4o"}), "t")
    assert matches(rule, event(app="cart", attributes={"model": "gpt-4o"}), "t")


# --- what one field accepts ----------------------------------------------------------------

def test_accepted_keeps_the_smallest_equivalent_form() -> None:
    accepted = Accepted.parse(["ab*", "a*", "abc", "b", "ab", "x*", "xy*"])
    assert accepted.exact == {"b"}  # "abc" and "ab" already start with "a"
    assert accepted.prefixes == ("a", "x")
    assert Accepted.parse("*").prefixes == ("",)
    assert Accepted.parse(["*", "a", "b*"]) == Accepted(frozenset(), ("",))
    assert Accepted.parse(["zz*", "yy*"]).prefixes == ("yy", "zz")  # same order every run


@pytest.mark.parametrize(("mine", "theirs", "covered"), [
    (["a*"], ["ab*"], True),
    (["a*"], ["abc"], True),
    (["a*"], ["a"], True),  # the prefix itself is a value starting with it
    (["a*"], ["ab*", "abc", "a"], True),
    (["ab*"], ["a*"], False),  # "ax" is accepted there, not here
    (["ab"], ["ab*"], False),  # an exact value never covers a prefix
    (["ab", "abc"], ["ab*"], False),
    (["a*"], ["b"], False),
    (["a*"], ["ab*", "b"], False),
    (["*"], ["ab*", "b"], True),
    (["a", "b"], ["a"], True),
    (["a"], ["*"], False),
    (["a*"], ["*"], False),
])
def test_covers_is_exact_for_values_and_conservative_for_prefixes(
        mine: list[str], theirs: list[str], covered: bool) -> None:
    assert Accepted.parse(mine).covers(Accepted.parse(theirs)) is covered


# --- the shadowed-route check --------------------------------------------------------------

@pytest.mark.parametrize(("earlier", "later"), [
    ({"app": ["checkout-*"]}, {"app": ["checkout-eu", "checkout-us*"]}),
    ({"app": ["checkout-*", "cart"]}, {"app": ["cart"], "topic": ["llm.traces"]}),
    ({"topic": ["llm.*"]}, {"topic": ["llm.traces"]}),
    ({"attributes": {"model": "gpt-4o*"}}, {"attributes": {"model": ["gpt-4o-mini*", "gpt-4o"]}}),
    ({"attributes": {"model": "*"}}, {"attributes": {"model": "gpt-4o-mini*"}}),
    ({"app": ["*"]}, {"app": ["checkout-*"]}),
])
def test_a_route_a_prefix_shadows_is_refused(earlier: dict[str, Any],
                                             later: dict[str, Any]) -> None:
    # The same checks as for exact values: refused in this order only, and with
    # ``routing: first`` only.
    check_shadowed(earlier, later)


@pytest.mark.parametrize(("earlier", "later"), [
    ({"app": ["checkout-eu"]}, {"app": ["checkout-*"]}),  # exact does not cover a prefix
    ({"app": ["checkout-e*"]}, {"app": ["checkout-*"]}),
    ({"app": ["checkout-*"]}, {"app": ["checkout-eu", "cart"]}),
    ({"attributes": {"model": "gpt-4o-mini"}}, {"attributes": {"model": "gpt-4o-mini*"}}),
    ({"attributes": {"model": "gpt-4o-mini*"}}, {"attributes": {"model": "*"}}),
    ({"app": ["*"]}, {}),  # the later one also takes events without an app
])
def test_routes_a_prefix_does_not_shadow_are_accepted(earlier: dict[str, Any],
                                                      later: dict[str, Any]) -> None:
    load_settings(None, routes=[route("first", earlier), route("second", later)])


# --- refused glob syntax -------------------------------------------------------------------

@pytest.mark.parametrize(("match", "field", "why"), [
    ({"app": ["gpt-*-mini"]}, "app", "allowed only at the end"),
    ({"app": ["**"]}, "app", "allowed only at the end"),
    ({"topic": ["*.traces"]}, "topic", "allowed only at the end"),
    ({"attributes": {"model": "gpt-4o-mini-????-??-??"}}, r"attributes\.model", "glob syntax"),
    ({"attributes": {"env": ["prod", "stag[ei]ng"]}}, r"attributes\.env", "glob syntax"),
])
def test_other_glob_syntax_is_refused_naming_the_field(match: dict[str, Any], field: str,
                                                       why: str) -> None:
    # Matched literally, such a value would match no real trace: a route that loads and
    # never gets an event.
    with pytest.raises(ConfigError, match=rf"routes\.0\.match: .*{field}: '.*': .*{why}"):
        load_settings(None, routes=[route("r", match)])


# --- start-up checks reasoning about match values ------------------------------------------

def test_a_topic_prefix_must_accept_an_input_topic() -> None:
    inputs = [{"topic": "llm.traces"}, {"topic": "llm.audit"}, {"topic": "other"}]
    ok = load_settings(None, inputs=inputs, routes=[route("r", {"topic": ["llm.*"]})])
    check_route_topics(ok)
    assert [t.topic for t in route_inputs(ok.routes[0], ok.inputs)] == ["llm.traces",
                                                                        "llm.audit"]
    bad = load_settings(None, inputs=inputs,
                        routes=[route("r", {"topic": ["other", "audit.*", "llm.*"]})])
    with pytest.raises(ConfigError, match=r"routes\[0\] \(r\)\.match\.topic: \['audit\.\*'\] "
                                          r"is not an input topic, nor a prefix of one"):
        check_route_topics(bad)
