"""Planning a canary's evaluations: routed as any event, sampled never, with gold answers.

The pipeline (``app/pipeline.py``) hands an event marked as a canary
(``evalstream.canary: "true"``, see ``app/calibration.py``) to :meth:`CanaryPlanner.plan`
instead of sampling it. What a canary's results are compared with, and how they are
counted, is ``app/calibration.py``'s; running them is the pipeline's as for any event.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass

from evalstream.app.bindings import Planned, RouteRuntime
from evalstream.app.calibration import Calibration, gold_keys, read_gold
from evalstream.events import TraceEvent
from evalstream.routing import Router

__all__ = ["CanaryPlanner"]


@dataclass(frozen=True, slots=True)
class CanaryPlanner:
    """Plans canaries on the pipeline's routes.

    Attributes:
        router: The routes an event matches.
        routes: The configured routes, in the router's order.
        calibration: Counts what a canary leaves unused (``ignored``).
        skip_no_route: Counts a ``no_route`` skip.
        skip_sampling: Counts a ``sampling`` skip.
    """

    router: Router
    routes: Sequence[RouteRuntime]
    calibration: Calibration
    _: KW_ONLY
    skip_no_route: Callable[[int], None]
    skip_sampling: Callable[[int], None]

    def plan(self, event: TraceEvent, topic: str) -> list[Planned]:
        """Every evaluator of the routes a canary matches, at rate 1, with its gold answer.

        Routed like any event (a canary tests the evaluators its route runs); sampling
        rates, down to an evaluator's own, do not apply, except a rate of 0 (turned off;
        on a route with ``strata``, the rate of the canary's stratum).
        Gold answers naming no evaluator of its routes, and canaries matching no route
        (also a ``no_route`` skip), are counted as ignored.
        """
        chosen = self.router.route(event, topic)
        if not chosen:
            # A skip like any other (every message ends as results, a skip or a dead
            # letter), and a canary that checks nothing.
            self.skip_no_route(1)
            self.calibration.ignored("no_route")
            return []
        attributes = event.attributes
        planned: list[Planned] = []
        names: set[str] = set()
        for index in chosen:
            _, evaluations = self.routes[index].select(event, topic)
            for p in evaluations:
                bound = p.bound
                names.add(bound.label)
                if p.sample_rate <= 0.0:
                    continue  # a rate of 0 turns the evaluator off: for canaries too
                gold = read_gold(attributes, bound.label, is_label=bound.is_label,
                                 labels=bound.evaluator.labels())
                planned.append(Planned(bound, 1.0, gold))
        unknown = sum(1 for name in gold_keys(attributes) if name not in names)
        if unknown:
            self.calibration.ignored("unknown_evaluator", unknown)
        if not planned:
            self.skip_sampling(1)
        return planned
