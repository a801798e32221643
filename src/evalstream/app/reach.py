"""What the configuration asks of its inputs: the event attributes it reads, per input topic.

OTLP decoders keep a fixed set of span attributes (``formats.genai.EVENT_ATTRIBUTES``) plus
the topic's ``attribute_map``. A route matching (or stratified by) another attribute
(``tenant``), a ``results.attributes`` entry or an evaluator param naming one
(``criteria_attribute``) was accepted and then never matched, never copied, or skipped
every event (or sampled every event at the default rate), silently. The worker
(and ``evalstream eval``) hand these names to the decoders, which carry each from the span
or resource attribute of the same key. Computed once at start-up: the hot path only pays
for the attributes the configuration reads. The evaluators' params come validated from the
caller (the pipeline's evaluators), not validated a second time here.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalstream.config import STRATA_FIELDS, InputTopic, Route, Settings
from evalstream.evaluators.base import EvaluatorParams

__all__ = ["attributes_read", "route_inputs"]


def route_inputs(route: Route, inputs: list[InputTopic]) -> list[InputTopic]:
    """The inputs ``route`` can get events from: those its ``match.topic`` accepts (by name
    or prefix), or all."""
    accepted = route.match.accepted_topic
    return list(inputs) if accepted is None else [t for t in inputs if accepted.accepts(t.topic)]


def attributes_read(settings: Settings,
                    params: Sequence[EvaluatorParams]) -> dict[str, tuple[str, ...]]:
    """Input topic -> the event attribute names the configuration reads from its events.

    ``results.attributes`` for every input; a route's ``match.attributes`` keys, its
    ``strata.by`` (unless a field: ``app``, ``topic``) and its evaluators' declared
    attributes (``EvaluatorParams.event_attributes``) for the inputs the route can get
    events from. In first-seen order, each name once.

    Args:
        settings: The configuration.
        params: The validated params of every route's evaluators, in route order, as the
            pipeline built them (``[e.params for e in pipeline.evaluators]``).

    Raises:
        ValueError: ``params`` are not one per evaluator of the routes.
    """
    if len(params) != sum(len(route.evaluators) for route in settings.routes):
        raise ValueError("params must be one per evaluator of the routes, in route order")
    declared = iter(params)
    read: dict[str, dict[str, None]] = {
        t.topic: dict.fromkeys(settings.results.attributes) for t in settings.inputs}
    for route in settings.routes:
        names = [*route.match.attributes]
        if route.strata is not None and route.strata.by not in STRATA_FIELDS:
            names.append(route.strata.by)
        for _ in route.evaluators:
            names.extend(next(declared).event_attributes())
        for topic in route_inputs(route, settings.inputs):
            read[topic.topic].update(dict.fromkeys(names))
    return {topic: tuple(names) for topic, names in read.items()}
