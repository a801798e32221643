"""The settings ``evalstream eval`` scores with, derived from the config and the options.

Without ``--config``, one route per evaldata data set to its own evaluator with the builtin
judge (:func:`default_settings`); ``--judge`` makes every evaluator ask one judge
(:func:`with_judge`); ``--no-sampling`` scores every routed item (:func:`without_sampling`).
Each returns new frozen ``Settings``, validated as a loaded config is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalstream.app.bindings import load_plugins
from evalstream.config import EvaluatorSpec, MatchRule, Route, Settings
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.evaluators.base import EvaluatorParams

__all__ = ["DEFAULT_EVALUATORS", "declared_params", "default_settings", "with_judge",
           "without_sampling"]

#: The evaluator (and its params) each evaldata file is scored with by default. Most params
#: only say where each item's fields are. Role adherence judges the labelled output alone
#: because the label is about that output, not the whole history. The 1-5 thresholds were
#: chosen on dev/ only: 3 ("moderate, still civil") is the worst level that counts as fine,
#: matching evaldata's mapping (frustrated = satisfaction <= 2, i.e. frustration >= 4).
DEFAULT_EVALUATORS: dict[str, dict[str, Any]] = {
    "refusal": {},
    "sentiment": {},
    "toxicity": {"source": "output", "threshold": 3},
    "frustration": {"source": "input", "threshold": 3},
    "topic_adherence": {"criteria_attribute": "criteria"},
    "role_adherence": {"role_from_system_prompt": True, "only_last_turn": True},
    "prompt_injection": {"source": "input"},
}


def default_settings(datasets: Sequence[str]) -> Settings:
    """One route per data set (matched by ``app``) with that data set's evaluator."""
    routes = []
    for name in sorted(set(datasets)):
        params = DEFAULT_EVALUATORS.get(name)
        if params is None:
            raise ConfigError(f"no default evaluator for evaldata items of {name!r}; "
                              "pass --config")
        routes.append(Route(name=name, match=MatchRule(app=[name]),
                            evaluators=[EvaluatorSpec(evaluator=name, params=params)]))
    if not routes:
        raise ConfigError("the input holds no evaldata items; pass --config to route "
                          "TraceEvents")
    return Settings(routes=routes)


def declared_params(settings: Settings) -> list[EvaluatorParams]:
    """Every route's evaluators' params, validated as the pipeline will validate them.

    ``main`` reads the input (its decoder carrying the attributes these params read) before
    the pipeline is built, so nothing built can give them yet. Plugins are imported first:
    a plugin's evaluator is unknown until then.

    Raises:
        ConfigError: a plugin cannot be imported, an evaluator is unknown or its params are
            invalid (as the pipeline would say it).
    """
    load_plugins(settings.plugins)
    return [registry.params_for(spec, where=f"routes[{ri}] ({route.name}) evaluators[{ei}]")
            for ri, route in enumerate(settings.routes)
            for ei, spec in enumerate(route.evaluators)]


def with_judge(settings: Settings, judge: str) -> Settings:
    """``settings`` with every evaluator asking ``judge`` (``--judge``).

    Raises:
        ConfigError: no judge of that name (a mistyped --judge was a traceback, exit 1).
    """
    known = {"builtin", *settings.judges}  # builtin always exists, configured or not
    if judge not in known:
        raise ConfigError(f"--judge {judge!r}: no judge of that name (known: "
                          f"{', '.join(sorted(known))})")
    routes = [r.model_copy(update={"evaluators": [s.model_copy(update={"judge": judge})
                                                  for s in r.evaluators]})
              for r in settings.routes]
    return Settings.model_validate({**settings.model_dump(), "routes": routes})


def _unsampled(rate: float) -> float:
    # 0 is not a sample of traffic but "off" (the canaries' rule too: app/canary_plan.py):
    # a route or stratum turned off in the config stays off.
    return 1.0 if rate > 0.0 else 0.0


def without_sampling(settings: Settings) -> Settings:
    """``settings`` with every sample rate above 0 set to 1 (``--no-sampling``).

    The global ``sampling.rate``, each route's ``sample_rate``, its ``strata`` rates and
    each evaluator's ``sample_rate``: every routed item is scored by every evaluator of its
    routes, and its results carry rate 1 (so the summary weighs them equally). Routing,
    strata (which stratum an item is in) and canaries are untouched. A rate of 0 stays 0:
    it turns a route or stratum off rather than sampling it, as it does for canaries (an
    evaluator's rate is above 0 by validation).
    """
    routes = []
    for route in settings.routes:
        strata = route.strata
        if strata is not None:
            strata = strata.model_copy(update={
                "rates": {value: _unsampled(rate) for value, rate in strata.rates.items()}})
        routes.append(route.model_copy(update={
            "sample_rate": _unsampled(route.sample_rate), "strata": strata,
            "evaluators": [s.model_copy(update={"sample_rate": 1.0})
                           for s in route.evaluators]}))
    sampling = settings.sampling.model_copy(
        update={"rate": _unsampled(settings.sampling.rate)})
    return Settings.model_validate({**settings.model_dump(), "sampling": sampling,
                                    "routes": routes})
