"""Start-up checks shared by ``check-config`` and ``run``: build everything, connect nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from evalstream.app.config_warnings import config_warnings
from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import route_inputs
from evalstream.config import (
    STRATA_FIELDS,
    Accepted,
    InputTopic,
    Settings,
    masked_dump,
)
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.formats import NEVER_SET, decoder_for
from evalstream.judges.registry import build_judges
from evalstream.metrics import Metrics
from evalstream.sinks.kafka import KafkaSink, result_record_bytes
from evalstream.sources.kafka import KafkaSource

__all__ = [
    "check_fields_provided",
    "check_kafka_clients",
    "check_pipeline",
    "check_request_size",
    "check_route_topics",
    "check_settings",
    "check_watch_labels",
    "describe_evaluators",
    "effective_config",
]


def check_route_topics(settings: Settings) -> None:
    """For the streaming worker: every topic a route matches on is one it consumes.

    A typo there would silently leave the route without traffic. (Not a rule of the
    settings themselves: ``evalstream eval --topic`` routes a file as any topic.)

    Raises:
        ConfigError: naming the route and the topic.
    """
    topics = [t.topic for t in settings.inputs]
    for ri, route in enumerate(settings.routes):
        # A prefix (``llm.*``) must accept at least one input, as an exact name must be one.
        unknown = sorted(value for value in route.match.topic or ()
                         if not any(Accepted.parse(value).accepts(t) for t in topics))
        if unknown:
            raise ConfigError(f"routes[{ri}] ({route.name}).match.topic: {unknown} is not an "
                              f"input topic, nor a prefix of one (inputs: {topics})")


def check_watch_labels(settings: Settings, pipeline: Pipeline) -> None:
    """Every label ``drift.watch_labels`` watches is one its evaluator can give.

    A misspelt label (``sentiment: negatve``) never matches a result: its share stays 0 and
    the alert the operator asked for can never fire. Checked against the built evaluators,
    whose label set can depend on their params (``topic``'s topics).

    Raises:
        ConfigError: naming the evaluator, the label and the labels it gives.
    """
    watched = settings.drift.watch_labels
    if not settings.drift.enabled or not watched:
        return
    for ri, route, evaluators in pipeline.route_evaluators():
        for spec, evaluator in evaluators:
            name = spec.label
            label = watched.get(name)
            # Any evaluator with a closed label set, not only label evaluators: the drift
            # engine watches the share of a label of any evaluator's results (refusal's
            # "refused"). An open set (labels() empty, e.g. "87% yes") cannot be checked.
            options = evaluator.labels()
            if label is None or not options or label in options:
                continue
            raise ConfigError(f"drift.watch_labels.{name}: {label!r} is not a label that "
                              f"routes[{ri}] ({route.name}) evaluator {name!r} gives "
                              f"(labels: {list(options)})")


def check_request_size(settings: Settings, pipeline: Pipeline) -> None:
    """``kafka.max_request_size`` holds the largest error result the worker can publish.

    A result the producer refuses as too large is replaced by an error result (carrying
    the refused result's judge spend), whose fields the pipeline clips so that it is small
    whatever the event and the judge's info held (``Pipeline.largest_error_results``).
    Were that refused too, the worker would stop, and stop again on every restart at the
    same message. (The stand-in for a dead letter too large to publish is smaller still:
    two 1,000-byte headers and a key of at most 1,024 bytes.) Below this floor, ordinary
    results of ~1 KB are refused as well.

    Raises:
        ConfigError: naming ``kafka.max_request_size`` and the floor.
    """
    limit = settings.kafka.max_request_size
    sizes = [(result_record_bytes(r, widest_key=True), r)
             for r in pipeline.largest_error_results()]
    if not sizes:
        return
    floor, worst = max(sizes, key=lambda pair: pair[0])
    if limit < floor:
        raise ConfigError(
            f"kafka.max_request_size ({limit}) must be at least {floor} bytes: the largest "
            f"error result the worker can publish (route {worst.route!r}, evaluator "
            f"{worst.evaluator!r}: ids, attributes, message and judge clipped to their "
            f"limits) must fit, or one event that makes it would stop the worker at every "
            f"restart")


def check_fields_provided(settings: Settings, pipeline: Pipeline) -> None:
    """Every field a route needs is one its inputs' formats can give.

    A route's ``match.requires``, its ``strata.by`` (when a field) and its evaluators'
    ``required_fields`` are compared with
    the fields the formats of the inputs it reads (its ``match.topic``, else all) can fill
    at all. A route requiring ``reference`` on OTLP inputs never matched, and
    ``text_similarity`` there skipped every event: loaded, and silent, but for a skip count.
    Only certain cases are refused: a field a format may carry is left to run time.

    Raises:
        ConfigError: naming the route, the field and the inputs.
    """
    for ri, route, evaluators in pipeline.route_evaluators():
        inputs = route_inputs(route, settings.inputs)
        if not inputs:
            continue  # check_route_topics names the topic
        where = f"routes[{ri}] ({route.name})"
        named = f"the route's inputs ({', '.join(f'{t.topic}: {t.format}' for t in inputs)})"

        def given(field: str, inputs: list[InputTopic] = inputs) -> bool:
            return any(field not in NEVER_SET[t.format] for t in inputs)

        for field in route.match.requires:
            if not given(field):
                raise ConfigError(f"{where}.match.requires: {named} never set {field!r}, so "
                                  f"the route would never match")
        strata = route.strata
        if strata is not None and strata.by in STRATA_FIELDS and not given(strata.by):
            raise ConfigError(f"{where}.strata.by: {named} never set {strata.by!r}, so "
                              f"every event would take the route's sample_rate")
        for spec, evaluator in evaluators:
            for need in evaluator.required_fields():
                if not any(given(field) for field in need):
                    raise ConfigError(
                        f"{where} evaluator {spec.label!r} needs {' or '.join(sorted(need))}, "
                        f"which {named} never set: it would skip every event")


def check_pipeline(settings: Settings, pipeline: Pipeline) -> list[str]:
    """The checks that need the built evaluators, as ``check-config`` and ``run`` both make
    them (one list, so the two cannot drift apart).

    Returns:
        :func:`config_warnings`: what loads and may be meant, but does nothing.

    Raises:
        ConfigError: a watched label no evaluator gives, a max_request_size below the
            largest error result, a field a route needs that its inputs never set.
    """
    check_watch_labels(settings, pipeline)
    check_request_size(settings, pipeline)
    check_fields_provided(settings, pipeline)
    return config_warnings(settings, pipeline)


def check_settings(settings: Settings) -> list[str]:
    """Build judges, every route's evaluators and every input's decoder, then discard them.

    Returns:
        :func:`config_warnings`: what loads and may be meant, but does nothing.

    Raises:
        ConfigError: naming the offending field (unknown evaluator, bad params, bad mapping,
            a route matching a topic no input consumes, a watched label no evaluator gives,
            a field a route needs that its inputs never set, a Kafka option aiokafka
            refuses, a max_request_size below the largest error result).
    """
    return _checked(settings)[1]


def _checked(settings: Settings) -> tuple[Pipeline, list[str]]:
    """:func:`check_settings`, also giving the pipeline it built."""
    check_route_topics(settings)
    metrics = Metrics()
    judges = build_judges(settings.judges, metrics)
    pipeline = Pipeline(settings, judges, metrics)  # imports the plugins first, as ``run``
    warnings = check_pipeline(settings, pipeline)
    for topic in settings.inputs:
        decoder_for(topic)
    asyncio.run(check_kafka_clients(settings))
    return pipeline, warnings


def effective_config(settings: Settings) -> tuple[dict[str, Any], list[str]]:
    """:func:`check_settings`, then the configuration as ``check-config`` prints it.

    That is :func:`~evalstream.config.masked_dump` with each route evaluator's ``params``
    as its evaluator validated them (its ``params_model``, defaults filled in) rather than
    as written: the settings hold them as a plain dict, and only the evaluator knows its
    defaults. A secret param (a ``SecretStr`` field) dumps masked, as the settings' own.

    Returns:
        The printable configuration and :func:`config_warnings`.

    Raises:
        ConfigError: as :func:`check_settings`.
    """
    pipeline, warnings = _checked(settings)
    data = masked_dump(settings)
    for ri, _, evaluators in pipeline.route_evaluators():
        shown = data["routes"][ri]["evaluators"]
        for ei, (_, evaluator) in enumerate(evaluators):
            # By alias, so that a key shown is one the config can be given.
            shown[ei]["params"] = evaluator.params.model_dump(mode="json", by_alias=True)
    return data, warnings


async def check_kafka_clients(settings: Settings) -> None:
    """Build (never start) the consumer and producer as ``run`` does: aiokafka checks some
    option values only then, and check-config must not call valid what ``run`` refuses.

    Raises:
        ConfigError: aiokafka refuses an option.
    """
    consumer = KafkaSource(settings.kafka, [t.topic for t in settings.inputs]).client()
    await consumer.stop()
    producer = KafkaSink(settings.kafka, settings.topics).client()
    await producer.stop()


def describe_evaluators() -> list[tuple[str, str, str]]:
    """(name, version, one-line summary) of every registered evaluator."""
    return [(name, registry.get(name).version, summary) for name, summary in registry.describe()]
