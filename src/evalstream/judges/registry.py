"""Judges by name: lazy backend factories and the one place judges are built and closed.

A backend module registers a factory with ``@judge_backend("type")``. The registry knows
which module provides each configured ``type`` and imports it only when a judge of that type
is configured, so an optional backend (and its HTTP client) never loads unless used
(the Inspect AI ``@modelapi`` pattern).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from evalstream.errors import ConfigError
from evalstream.judges.base import Judge
from evalstream.metrics import Metrics

__all__ = ["BUILTIN", "JudgeFactory", "build_judges", "close_judges", "judge_backend"]

#: The name under which the offline judge is always available.
BUILTIN = "builtin"

#: ``factory(name, config, metrics, built)`` -> Judge. ``built`` holds the judges made so far
#: (a cascade looks up the judges it composes there).
JudgeFactory = Callable[[str, Any, Metrics, Mapping[str, Judge]], Judge]
_F = TypeVar("_F", bound=JudgeFactory)

_FACTORIES: dict[str, JudgeFactory] = {}
#: Where each backend type lives; imported on first use.
_MODULES: dict[str, str] = {
    "builtin": "evalstream.judges.builtin",
    "openai": "evalstream.judges.openai_compat",
    "cascade": "evalstream.judges.cascade",
}


def judge_backend(name: str) -> Callable[[_F], _F]:
    """Register a judge factory for config ``type: name``.

    Args:
        name: The ``type`` value in the judge configuration.

    Returns:
        A decorator that records the factory and returns it unchanged.
    """

    def register(factory: _F) -> _F:
        _FACTORIES[name] = factory
        return factory

    return register


def _factory(kind: str) -> JudgeFactory:
    if kind not in _FACTORIES:
        module = _MODULES.get(kind)
        if module is None:
            raise ConfigError(f"unknown judge type {kind!r} (known: {sorted(_MODULES)})")
        importlib.import_module(module)
    try:
        return _FACTORIES[kind]
    except KeyError:  # pragma: no cover - a module that forgot to register itself
        raise ConfigError(f"judge type {kind!r} did not register a factory") from None


def _depends_on(config: Any) -> tuple[str, ...]:
    first = getattr(config, "first", None)
    then = getattr(config, "then", None)
    return tuple(n for n in (first, then) if isinstance(n, str))


def build_judges(configs: Mapping[str, Any], metrics: Metrics) -> dict[str, Judge]:
    """Build every configured judge, plus ``"builtin"`` which is always present.

    Judges that compose others (cascades) are built after the judges they name.

    Args:
        configs: ``settings.judges``: name -> ``JudgeConfig``.
        metrics: The metrics container shared by the worker.

    Returns:
        name -> Judge. Close them with :func:`close_judges`.

    Raises:
        ConfigError: unknown type, or a cycle / dangling reference between cascades.
    """
    built: dict[str, Judge] = {}
    if BUILTIN not in configs:
        built[BUILTIN] = _factory("builtin")(BUILTIN, None, metrics, built)
    visiting: set[str] = set()

    def build(name: str) -> None:
        if name in built:
            return
        if name not in configs:
            raise ConfigError(f"judges: {name!r} is referenced but not defined")
        if name in visiting:
            raise ConfigError(f"judges.{name}: cascades refer to each other in a cycle")
        visiting.add(name)
        config = configs[name]
        for dep in _depends_on(config):
            build(dep)
        built[name] = _factory(str(config.type))(name, config, metrics, built)
        visiting.discard(name)

    # A failure part-way leaves the judges built so far unclosed, which is harmless: their
    # HTTP clients open no connection before the first request.
    for name in configs:
        build(name)
    return built


async def close_judges(judges: Mapping[str, Judge]) -> None:
    """Close every judge (cascades first, then the backends they use)."""
    for judge in reversed(list(judges.values())):
        await judge.aclose()
