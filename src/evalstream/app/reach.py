"""What the configuration asks of its inputs: the event attributes it reads, per input topic.

OTLP decoders keep a fixed set of span attributes (``formats.genai.EVENT_ATTRIBUTES``) plus
the topic's ``attribute_map``. A route matching another attribute (``tenant``), a
``results.attributes`` entry or an evaluator param naming one (``criteria_attribute``) was
accepted and then never matched, never copied, or skipped every event, silently. The worker
(and ``evalstream eval``) hand these names to the decoders, which carry each from the span
or resource attribute of the same key. Computed once at start-up: the hot path only pays
for the attributes the configuration reads.
"""

from __future__ import annotations

from pydantic import ValidationError

from evalstream.config import EvaluatorSpec, InputTopic, Route, Settings
from evalstream.errors import ConfigError
from evalstream.evaluators import registry

__all__ = ["attributes_read", "route_inputs"]


def route_inputs(route: Route, inputs: list[InputTopic]) -> list[InputTopic]:
    """The inputs ``route`` can get events from: those its ``match.topic`` names, or all."""
    topics = route.match.topic
    return list(inputs) if topics is None else [t for t in inputs if t.topic in topics]


def _evaluator_attributes(spec: EvaluatorSpec) -> tuple[str, ...]:
    try:
        params = registry.get(spec.evaluator).params_model.model_validate(spec.params)
    except (ConfigError, ValidationError):
        return ()  # reported, naming the field, when the pipeline builds the evaluator
    return params.event_attributes()


def attributes_read(settings: Settings) -> dict[str, tuple[str, ...]]:
    """Input topic -> the event attribute names the configuration reads from its events.

    ``results.attributes`` for every input; a route's ``match.attributes`` keys and its
    evaluators' declared attributes (``EvaluatorParams.event_attributes``) for the inputs
    the route can get events from. In first-seen order, each name once.
    """
    read: dict[str, dict[str, None]] = {
        t.topic: dict.fromkeys(settings.results.attributes) for t in settings.inputs}
    for route in settings.routes:
        names = [*route.match.attributes]
        for spec in route.evaluators:
            names.extend(_evaluator_attributes(spec))
        for topic in route_inputs(route, settings.inputs):
            read[topic.topic].update(dict.fromkeys(names))
    return {topic: tuple(names) for topic, names in read.items()}
