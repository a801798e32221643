"""Configured evaluators bound, once, to their route, metric children and result ids.

Built when the pipeline is: plugin modules are imported (``plugins:``), each route's
evaluators are created from the registry, and each is bound to what every one of its
evaluations needs, so the hot path (``app/pipeline.py``) does no label lookups, config
serialisation or rate arithmetic per evaluation: the ``inc``/``observe`` of its metric
children, its ``result_id`` function and version, and its evaluations as planned at their
effective sample rates (:class:`Planned`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pydantic_core

from evalstream.app.calibration import CanaryGold
from evalstream.config import EvaluatorSpec, Route, Settings
from evalstream.config.judges import judge_identity
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.evaluators.base import INITIAL_VERSION, Evaluator
from evalstream.events import TraceEvent, result_ids
from evalstream.judges.base import Judge
from evalstream.metrics import LabelSet, Metrics
from evalstream.sampling import Sampler

__all__ = ["OUTCOMES", "BoundEvaluator", "Planned", "RouteRuntime", "build_routes",
           "load_plugins"]

#: Outcomes of one evaluation in ``evalstream_evaluations_total``.
OUTCOMES = ("passed", "failed", "labelled", "error", "skipped")


def load_plugins(modules: Sequence[str]) -> None:
    """Import user modules that register evaluators (``plugins:`` in the config).

    Raises:
        ConfigError: a module cannot be imported (the message names it).
    """
    for i, name in enumerate(modules):
        try:
            importlib.import_module(name)
        except Exception as exc:  # any import failure is a configuration problem
            raise ConfigError(f"plugins.{i}: cannot import {name!r}: "
                              f"{type(exc).__name__}: {exc}") from exc


@dataclass(slots=True)
class BoundEvaluator:
    """One configured evaluator with its metric children bound once (hot path)."""

    route: str
    label: str
    evaluator: Evaluator[Any]
    labels: LabelSet
    #: ``inc`` of the outcome / weighted-outcome counter children, by outcome.
    outcomes: dict[str, Callable[[float], None]]
    weighted: dict[str, Callable[[float], None]]
    #: ``inc`` of the squared-weight outcome counter children, by outcome.
    weight_squared: dict[str, Callable[[float], None]]
    #: ``observe`` of the score and duration histogram children.
    score_hist: Callable[[float], None]
    #: ``inc`` of the route/evaluator spend counter child.
    cost: Callable[[float], None]
    seconds: Callable[[float], None]
    #: ``type(evaluator).is_label_evaluator``, read once rather than per result.
    is_label: bool
    #: ``events.result_id`` of this evaluator for an event id (config serialised once).
    result_id: Callable[[str], str]
    #: ``EvalResult.evaluator_version`` of its results (``Evaluator.result_version``).
    version: str
    #: The configured name of its judge (``EvaluatorSpec.judge``): the ``judge`` label of
    #: the canary calibration metrics.
    judge: str = "builtin"
    #: Per label value (``labels`` keeps them few), ``inc`` of its label and weighted-label
    #: counter children: bound at a value's first result, not looked up for every one.
    label_incs: dict[str, tuple[Callable[[float], None], Callable[[float], None]]] = field(
        default_factory=dict)


@dataclass(frozen=True, slots=True)
class Planned:
    """One evaluation to run: an evaluator of a route, at the rate the event was sampled.

    A canary's evaluation (``canary`` set: its gold answer for this evaluator) is planned
    whatever the sampling, at rate 1, and counted as calibration, not traffic.
    """

    bound: BoundEvaluator
    sample_rate: float
    canary: CanaryGold | None = None
    #: Its results' weight, 1/sample_rate, and that squared: fixed per plan, so counting a
    #: result does no arithmetic (a rate of 0 is never recorded: infinite).
    weight: float = field(init=False)
    weight_squared: float = field(init=False)

    def __post_init__(self) -> None:
        weight = 1.0 / self.sample_rate if self.sample_rate > 0.0 else float("inf")
        object.__setattr__(self, "weight", weight)
        object.__setattr__(self, "weight_squared", weight * weight)


@dataclass(slots=True)
class RouteRuntime:
    """One configured route: its bound evaluators and sampling, built once."""

    route: Route
    evaluators: tuple[BoundEvaluator, ...]
    #: ``inc`` of the route's ``evalstream_events_sampled_total`` child.
    sampled: Callable[[float], None]
    #: The route's effective rate (global x route; both fixed by the settings); with
    #: ``strata``, that of the strata it does not list.
    rate: float
    #: Its evaluations as planned, built once: plans share them (they are immutable). Each
    #: carries its evaluator's effective rate (global x route x evaluator).
    planned: tuple[Planned, ...]
    #: Every evaluator at the route's own rate (the common case): no per-evaluator test.
    uniform: bool
    #: With ``strata``: what picks an event's stratum (``Strata.by``), else None.
    strata_by: str | None = None
    #: Per listed stratum value, its (rate, planned) as ``rate`` and ``planned`` are the
    #: route's own: built once, so picking a stratum is one dict lookup.
    strata: dict[str, tuple[float, tuple[Planned, ...]]] = field(default_factory=dict)

    def select(self, event: TraceEvent, topic: str) -> tuple[float, tuple[Planned, ...]]:
        """The effective rate and evaluations of ``event``'s stratum: those of its value
        when ``strata`` lists it, else the route's own (``rate``, ``planned``)."""
        by = self.strata_by
        if by is not None:
            value = (event.app if by == "app" else topic if by == "topic"
                     else event.attributes.get(by))
            if value is not None:
                found = self.strata.get(value)
                if found is not None:
                    return found
        return self.rate, self.planned

    def every_planned(self) -> Iterator[Planned]:
        """Every evaluation the route can plan: its own, then each stratum's."""
        yield from self.planned
        for _, planned in self.strata.values():
            yield from planned

    def widest_planned(self) -> list[Planned]:
        """Per evaluator, of the evaluations that publish (rate > 0), the one whose rate
        is the longest in a result's JSON: its error results differ only in that number,
        so this one's is the largest. (One per stratum, 10,000 strata made 10,000 error
        results per evaluator to build and size at start-up.)"""
        widest: dict[str, tuple[int, Planned]] = {}
        for planned in self.every_planned():
            if planned.sample_rate <= 0.0:
                continue
            # The serializer of EvalResult's JSON (pydantic-core's), for its exact text.
            width = len(pydantic_core.to_json(planned.sample_rate))
            label = planned.bound.label  # unique in a route
            if label not in widest or width > widest[label][0]:
                widest[label] = (width, planned)
        return [planned for _, planned in widest.values()]


def build_routes(settings: Settings, judges: Mapping[str, Judge], metrics: Metrics,
                 sampler: Sampler) -> tuple[RouteRuntime, ...]:
    """Every route of ``settings`` with its evaluators created and bound, in config order.

    Args:
        settings: The configuration (its ``plugins`` must already be loaded).
        judges: Judges by name; must include every judge a route names.
        metrics: The metrics the evaluators' children are bound on.
        sampler: The sampler whose global rate scales each route's.

    Raises:
        ConfigError: an evaluator is unknown or its params are invalid (naming the field).
    """
    # Imported when routes are built, not with this module: the builtin judge's package
    # loads its lexicons (~0.1 s), which a process importing the app layer without
    # building routes should not pay.
    from evalstream.judges.builtin import VERSION
    from evalstream.judges.prompt import PROMPT_VERSION

    identity_of = partial(judge_identity, settings.judges, builtin_version=VERSION,
                          prompt_version=PROMPT_VERSION)
    return tuple(_build_route(ri, route, judges, metrics, sampler, identity_of)
                 for ri, route in enumerate(settings.routes))


def _build_route(ri: int, route: Route, judges: Mapping[str, Judge], metrics: Metrics,
                 sampler: Sampler, identity_of: Callable[[str], Any]) -> RouteRuntime:
    bound = []
    for ei, spec in enumerate(route.evaluators):
        where = f"routes[{ri}] ({route.name}) evaluators[{ei}]"
        evaluator = registry.create(spec, judges, where=where)
        judge = identity_of(spec.judge)
        bound.append(_bind(route.name, spec, evaluator, metrics, judge))

    def at(route_rate: float) -> tuple[float, tuple[Planned, ...]]:
        rate = sampler.rate_for(route_rate)
        return rate, tuple(Planned(b, rate * spec.sample_rate)
                           for b, spec in zip(bound, route.evaluators, strict=True))

    rate, planned = at(route.sample_rate)
    strata = route.strata
    return RouteRuntime(route, tuple(bound),
                        metrics.events_sampled.labels(route.name).inc, rate, planned,
                        all(spec.sample_rate == 1.0 for spec in route.evaluators),
                        strata_by=strata.by if strata else None,
                        strata={value: at(r) for value, r in strata.rates.items()}
                        if strata else {})


def _bind(route: str, spec: EvaluatorSpec, evaluator: Evaluator[Any],
          metrics: Metrics, judge: Any) -> BoundEvaluator:
    label = spec.label
    # The route, the evaluator config, its version and its judge's identity (kind, model
    # and scoring options, in place of the judge's name: ``judge_identity``) go into every
    # result's id; not the sample rate, so an event scored before and after a rate change
    # keeps its result's id. The spec's version goes in joined with the evaluator's own
    # (``Evaluator.result_version``).
    identity = spec.model_dump(mode="json", exclude={"sample_rate", "version"})
    version = evaluator.result_version
    if version != INITIAL_VERSION:
        # Only a later version (the class's, or one set in the config) is added: ids
        # published before evaluators had versions, all at "1", stay the same.
        identity["version"] = version
    identity["judge"] = judge
    return BoundEvaluator(
        route=route,
        label=label,
        evaluator=evaluator,
        labels=LabelSet(evaluator.labels()),
        outcomes={o: metrics.evaluations.labels(route, label, o).inc for o in OUTCOMES},
        weighted={o: metrics.evaluations_weighted.labels(route, label, o).inc
                  for o in OUTCOMES},
        weight_squared={o: metrics.evaluations_weight_squared.labels(route, label, o).inc
                        for o in OUTCOMES},
        score_hist=metrics.scores.labels(route, label).observe,
        cost=metrics.evaluation_cost.labels(route, label).inc,
        seconds=metrics.evaluation_seconds.labels(label).observe,
        is_label=type(evaluator).is_label_evaluator,
        result_id=result_ids(route, label, identity),
        version=version,
        judge=spec.judge,
    )
