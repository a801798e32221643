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
    """Whether ``event`` (read from ``topic``) satisfies every condition of ``rule``."""
    if rule.app is not None and event.app not in rule.app:
        return False
    if rule.topic is not None and topic not in rule.topic:
        return False
    for key, accepted in rule.attributes.items():
        value = event.attributes.get(key)
        if value is None:
            return False
        if accepted == "*":
            continue
        if isinstance(accepted, str):
            if value != accepted:
                return False
        elif value not in accepted:
            return False
    return all(_present(event, name) for name in rule.requires)


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
