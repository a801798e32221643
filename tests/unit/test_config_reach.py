"""No silent filters: a config that loads but can never route (or score) an event is refused
at start-up, naming the field and why; what only the data can tell is left to run time."""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.config import load_settings
from evalstream.errors import ConfigError


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
