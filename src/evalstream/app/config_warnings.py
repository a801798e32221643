"""Start-up warnings: settings that load and may be meant, but do nothing here.

Said by ``check-config`` and logged by ``run`` at start-up (``checks.check_pipeline``),
never refused: each can be deliberate.
"""

from __future__ import annotations

from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import route_inputs
from evalstream.config import (
    DriftSettings,
    EvaluatorSpec,
    OpenAIJudgeConfig,
    Settings,
)
from evalstream.config.judges import judges_reached
from evalstream.evaluators.labels import LabelEvaluator
from evalstream.judges.logprobs import first_token_distinguishable

__all__ = ["config_warnings"]


def config_warnings(settings: Settings, pipeline: Pipeline) -> list[str]:
    """Settings that may be meant but do nothing here: said at start-up, never refused.

    Each can be deliberate (a rate of 0 pauses judge spend; a shared config watches an
    evaluator another deployment runs), so refusing it could block a working deploy; said
    once, it is not silent. Nothing here depends on the traffic.

    Returns:
        One sentence per finding, naming the setting (no trace content).
    """
    found: list[str] = []
    if pipeline.max_rate <= 0.0:
        found.append(
            f"sampling: sampling.rate ({settings.sampling.rate:g}) x each route's sample_rate "
            f"is 0 for every route (and stratum): the worker evaluates nothing, canaries "
            f"included (every event counts as a `sampling` skip)")
    if settings.drift.enabled:
        labels = settings.evaluator_labels
        # The defaults (watched when such evaluators run) are no finding, written out or not.
        defaults = DriftSettings().watch_labels.items()
        unknown = sorted(name for name, label in settings.drift.watch_labels.items()
                         if name not in labels and (name, label) not in defaults)
        if unknown:
            found.append(f"drift.watch_labels: {unknown} name no evaluator of the routes (by "
                         f"its `name` when it has one; known: {sorted(labels)}): nothing is "
                         f"watched for them")
    routes = settings.routes
    if settings.worker.routing == "first" and pipeline.max_rate > 0.0:
        for ri, route in enumerate(routes[:-1]):
            if settings.sampling.rate * max(route.sample_rates()) <= 0.0:
                found.append(
                    f"routes[{ri}] ({route.name}).sample_rate: 0 turns the route off, and with "
                    f"worker.routing: first the events it matches do not go on to the routes "
                    f"after it either (they count as `sampling` skips); narrow its match or "
                    f"remove it to let them through")
    for ri, route in enumerate(routes):
        strata = route.strata
        if strata is not None and all(r == route.sample_rate for r in strata.rates.values()):
            found.append(f"routes[{ri}] ({route.name}).strata: every rate listed equals the "
                         f"route's sample_rate ({route.sample_rate:g}): the strata change "
                         f"nothing")
        if strata is not None and strata.by == "topic":
            read = {t.topic for t in route_inputs(route, settings.inputs)}
            idle = sorted(set(strata.rates) - read)
            if idle:
                found.append(f"routes[{ri}] ({route.name}).strata.rates: {idle} is no topic "
                             f"the route reads (its inputs: {sorted(read)}): never applied")
        elif strata is not None:
            # Likewise a value the route's own match refuses (match.app, or the attribute's
            # accepted values or prefixes): its events never reach the route, so its rate
            # never applies.
            match = route.match
            where, given, accepted = (
                ("match.app", match.app, match.accepted_app) if strata.by == "app" else
                (f"match.attributes.{strata.by}", match.attributes.get(strata.by),
                 dict(match.accepted_attributes).get(strata.by)))
            idle = (sorted(value for value in strata.rates if not accepted.accepts(value))
                    if accepted is not None else [])
            if idle:
                shown = sorted([given] if isinstance(given, str) else given or ())
                found.append(f"routes[{ri}] ({route.name}).strata.rates: {idle} is no value "
                             f"the route's {where} accepts ({shown}): never applied")
    used = judges_reached(settings.judges,
                          {spec.judge for route in routes for spec in route.evaluators})
    unused = sorted(set(settings.judges) - used)
    if unused:
        found.append(f"judges: {unused} defined, but no evaluator names them (nor a cascade "
                     f"in use): they are never asked")
    for ri, route, evaluators in pipeline.route_evaluators():
        where = f"routes[{ri}] ({route.name})"
        for spec, evaluator in evaluators:
            found.extend(f"{where} evaluator {spec.label!r}: params.{why}"
                         for why in evaluator.params.unused())
            if (spec.reasons == "failures" and isinstance(evaluator, LabelEvaluator)
                    and not evaluator.fail_labels()):
                found.append(f"{where} evaluator {spec.label!r}: reasons: failures never "
                             f"gives a reason, as no label counts as a failure (set its "
                             f"failing labels, or reasons: always)")
            if isinstance(evaluator, LabelEvaluator):
                found.extend(_json_answers(settings, where, spec, evaluator.options()))
    return found


def _logprob_judges(settings: Settings, name: str) -> list[str]:
    """The OpenAI judges that may answer for judge ``name`` by logprobs: itself, or any
    step of its cascade (nested ones too).

    Any step, not only the last: an OpenAI first step answering 0/1 is always confident,
    so it never escalates either. A judge with ``logprobs: never`` asks for JSON answers
    whatever the labels, so one-word labels would change nothing there. The builtin judge
    scores labels itself (a topic's words), whatever their spelling.
    """
    judges = settings.judges
    return sorted(step for step in judges_reached(judges, (name,))
                  if isinstance(config := judges.get(step), OpenAIJudgeConfig)
                  and config.logprobs != "never")


def _json_answers(settings: Settings, where: str, spec: EvaluatorSpec,
                  options: tuple[str, ...]) -> list[str]:
    """A finding when an LLM judge cannot read ``options`` from its first token.

    The judge decides so with :func:`first_token_distinguishable` (and then logs
    ``judge_options_not_first_token`` at the first request); the same predicate here says
    it before any traffic, naming the labels it refuses.
    """
    if first_token_distinguishable(options):
        return []
    llm = _logprob_judges(settings, spec.judge)
    if not llm:
        return []
    words = [o for o in options if not first_token_distinguishable((o,))]
    prefixes = [f"{a}/{b}" for a in options for b in options
                if a != b and first_token_distinguishable((a,)) and
                first_token_distinguishable((b,)) and not first_token_distinguishable((a, b))
                and len(a) <= len(b)]
    why = "; ".join(part for part in (
        f"not one word each: {words}" if words else "",
        f"one the prefix of another: {prefixes}" if prefixes else "") if part)
    return [f"{where} evaluator {spec.label!r}: its labels cannot be told apart by the first "
            f"token ({why}), so judge {', '.join(map(repr, llm))} asks for a JSON answer: "
            f"probabilities are 0/1 (confidence always 1) and calibration metrics degenerate; "
            f"use one-word labels (letters or digits, none a prefix of another) to keep "
            f"probabilities, or accept it"]
