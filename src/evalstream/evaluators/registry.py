"""Evaluators register by name; routes create them by name with validated params."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from evalstream.config import EvaluatorSpec
from evalstream.config.hints import error_message
from evalstream.config.routes import VERSION_PATTERN
from evalstream.errors import ConfigError
from evalstream.evaluators.base import Evaluator, EvaluatorParams
from evalstream.judges.base import Judge

__all__ = ["create", "describe", "get", "names", "params_for", "register"]

_REGISTRY: dict[str, type[Evaluator[Any]]] = {}
E = TypeVar("E", bound=type[Evaluator[Any]])
_VERSION = re.compile(VERSION_PATTERN)


def register(cls: E) -> E:
    """Class decorator: make ``cls`` available under ``cls.name``.

    Raises:
        RuntimeError: another class is registered under the name.
        TypeError: ``cls.version`` is not a short version string (letters, digits, ``.``,
            ``_``, ``-``): it goes into result ids and results.
    """
    name = cls.name
    version = cls.version
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise TypeError(f"evaluator {name!r}: version {version!r} must match {VERSION_PATTERN}")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise RuntimeError(f"evaluator {name!r} registered twice")
    _REGISTRY[name] = cls
    return cls


def _load_builtins() -> None:
    # Importing the package registers every builtin evaluator module.
    import evalstream.evaluators.catalog  # noqa: F401


def names() -> list[str]:
    """All registered evaluator names, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> type[Evaluator[Any]]:
    """The evaluator class registered as ``name``."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown evaluator {name!r}; known: {', '.join(sorted(_REGISTRY))}"
                          ) from None


def describe() -> list[tuple[str, str]]:
    """(name, summary) for every evaluator."""
    _load_builtins()
    return [(n, _REGISTRY[n].summary) for n in sorted(_REGISTRY)]


def params_for(spec: EvaluatorSpec, *, where: str) -> EvaluatorParams:
    """The validated params of the evaluator ``spec`` names, as :func:`create` gives them
    to it: for a caller that needs them before the evaluators are built.

    Raises:
        ConfigError: unknown evaluator, or invalid params (naming the field), as
            :func:`create` says it.
    """
    return _validated(spec, where)[1]


def _validated(spec: EvaluatorSpec, where: str
               ) -> tuple[type[Evaluator[Any]], EvaluatorParams]:
    try:
        cls = get(spec.evaluator)
    except ConfigError as exc:
        raise ConfigError(f"{where}.evaluator: {exc}") from None
    try:
        params = cls.params_model.model_validate(spec.params)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(['params', *(str(p) for p in err['loc'])])}: "
            f"{error_message(err, cls.params_model, list_known=True)}"
            for err in exc.errors()
        )
        raise ConfigError(f"{where} ({spec.label}): {problems}") from None
    return cls, params


def create(spec: EvaluatorSpec, judges: Mapping[str, Judge], *, where: str) -> Evaluator[Any]:
    """Build the evaluator ``spec`` names, validating its params.

    Args:
        spec: The evaluator entry from a route.
        judges: Judges by name.
        where: Where the spec is in the config (``"routes[0] (support) evaluators[1]"``), put
            at the front of every error so the user can find the field.

    Raises:
        ConfigError: unknown evaluator or judge, invalid params (naming the field), or a
            judge that cannot answer the evaluator's task (the builtin judge answers a fixed
            set; everything else needs an LLM judge).
    """
    cls, params = _validated(spec, where)
    judge = judges.get(spec.judge)
    if judge is None:
        raise ConfigError(f"{where}.judge: no judge named {spec.judge!r}")
    evaluator = cls(spec, params, judge)
    missing = [task for task in evaluator.judge_tasks() if not judge.supports(task)]
    if missing:
        # Caught here, a config the judge cannot run fails at start-up (and in check-config)
        # instead of turning every result into an error at run time.
        raise ConfigError(
            f"{where} ({spec.label}).judge: judge {spec.judge!r} cannot answer "
            f"{', '.join(repr(t) for t in missing)}; configure an LLM judge under `judges:` "
            f"and set `judge: <its name>` on this evaluator")
    return evaluator
