"""Routing: which configured routes an event belongs to (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from evalstream.config import MatchRule, Route
from evalstream.events import TraceEvent

__all__ = ["Router", "matches"]


def _present(event: TraceEvent, name: str) -> bool:
    value = getattr(event, name)
    if isinstance(value, str):
        return bool(value.strip())
    return bool(value)


def matches(rule: MatchRule, event: TraceEvent, topic: str) -> bool:
    """Whether ``event`` (read from ``topic``) satisfies every condition of ``rule``.

    Runs for every route a sampled event is tried on: each field is a set lookup, plus one
    ``str.startswith`` over a tuple only when the field lists prefixes (``gpt-4o-mini*``).
    The accepted values are parsed once per rule (``MatchRule.accepted_*``).
    """
    accepted = rule.accepted_app
    if accepted is not None:
        app = event.app
        if app is None or not accepted.accepts(app):
            return False
    accepted = rule.accepted_topic
    if accepted is not None and not accepted.accepts(topic):
        return False
    if rule.attributes:
        attributes = event.attributes
        for key, accepted in rule.accepted_attributes:
            value = attributes.get(key)
            if value is None or not accepted.accepts(value):
                return False
    # A loop, not ``all(generator)``: building the generator cost more than the rest of
    # the checks, paid per route per event.
    for name in rule.requires:  # noqa: SIM110 - see above
        if not _present(event, name):
            return False
    return True


class Router:
    """Chooses routes for events: the first match, or every match."""

    __slots__ = ("_mode", "_routes")

    def __init__(self, routes: Sequence[Route], mode: Literal["first", "all"] = "first") -> None:
        self._routes = tuple(routes)
        self._mode = mode

    def route(self, event: TraceEvent, topic: str) -> list[int]:
        """Indices (into the configured routes) of the routes ``event`` goes to, in order."""
        chosen: list[int] = []
        for i, route in enumerate(self._routes):
            if matches(route.match, event, topic):
                chosen.append(i)
                if self._mode == "first":
                    break
        return chosen
