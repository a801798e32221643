"""Start-up checks shared by ``check-config`` and ``run``: build everything, connect nothing."""

from __future__ import annotations

import asyncio

from evalstream.app.pipeline import Pipeline
from evalstream.config import Settings
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.formats import decoder_for
from evalstream.judges.registry import build_judges
from evalstream.metrics import Metrics
from evalstream.sinks.kafka import KafkaSink
from evalstream.sources.kafka import KafkaSource

__all__ = [
    "check_kafka_clients",
    "check_route_topics",
    "check_settings",
    "check_watch_labels",
    "describe_evaluators",
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
        unknown = sorted(set(route.match.topic or ()) - set(topics))
        if unknown:
            raise ConfigError(f"routes[{ri}] ({route.name}).match.topic: {unknown} is not an "
                              f"input topic (inputs: {topics})")


def check_watch_labels(settings: Settings, pipeline: Pipeline) -> None:
    """Every label ``drift.watch_labels`` watches is one its label evaluator can give.

    A misspelt label (``sentiment: negatve``) never matches a result: its share stays 0 and
    the alert the operator asked for can never fire. Checked against the built evaluators,
    whose label set can depend on their params (``topic``'s topics).

    Raises:
        ConfigError: naming the evaluator, the label and the labels it gives.
    """
    watched = settings.drift.watch_labels
    if not settings.drift.enabled or not watched:
        return
    specs = [(ri, route.name, spec.label) for ri, route in enumerate(settings.routes)
             for spec in route.evaluators]
    for (ri, route, name), evaluator in zip(specs, pipeline.evaluators, strict=True):
        label = watched.get(name)
        options = evaluator.labels()
        if label is None or not evaluator.is_label_evaluator or label in options:
            continue
        raise ConfigError(f"drift.watch_labels.{name}: {label!r} is not a label that "
                          f"routes[{ri}] ({route}) evaluator {name!r} gives "
                          f"(labels: {list(options)})")


def check_settings(settings: Settings) -> None:
    """Build judges, every route's evaluators and every input's decoder, then discard them.

    Raises:
        ConfigError: naming the offending field (unknown evaluator, bad params, bad mapping,
            a route matching a topic no input consumes, a watched label no evaluator gives,
            a Kafka option aiokafka refuses).
    """
    check_route_topics(settings)
    metrics = Metrics()
    judges = build_judges(settings.judges, metrics)
    check_watch_labels(settings, Pipeline(settings, judges, metrics))
    for topic in settings.inputs:
        decoder_for(topic)
    asyncio.run(check_kafka_clients(settings))


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
