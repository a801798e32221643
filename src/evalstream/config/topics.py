"""Kafka topics: what the worker consumes (and how it is encoded) and where it writes."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from evalstream.config.section import Section

__all__ = ["InputTopic", "TopicName", "TopicSettings"]

#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``).
_TOPIC_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_TOPIC_MAX = 249
_TOPIC_RULE = (f"a Kafka topic name is 1 to {_TOPIC_MAX} characters of a-z, A-Z, 0-9, "
               f"'.', '_' and '-', and not '.' or '..'")


def _kafka_topic_name(name: str) -> str:
    """``name`` if Kafka accepts it as a topic name.

    Checked at load: otherwise a typo (``llm traces``) passes check-config and fails only
    once the worker runs, as an obscure broker error (InvalidTopicError, or a topic that
    "does not exist" for ever).
    """
    if not name:
        problem = "it is empty"
    elif len(name) > _TOPIC_MAX:
        problem = f"it is {len(name)} characters long"
    elif name in (".", ".."):
        problem = f"it is {name!r}"
    elif not _TOPIC_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_CHARS.fullmatch(c)})
        problem = f"{name!r} holds {', '.join(repr(c) for c in bad)}"
    else:
        return name
    raise ValueError(f"not a valid Kafka topic name: {problem} ({_TOPIC_RULE})")


#: A topic name Kafka accepts (see ``_kafka_topic_name``).
TopicName = Annotated[str, AfterValidator(_kafka_topic_name)]


#: The span kinds evaluated by default (``InputTopic.llm_operations``).
_LLM_OPERATIONS = ("chat", "text_completion", "generate_content", "completion", "llm")


class InputTopic(Section):
    """One topic to consume and how its messages are encoded."""

    topic: TopicName
    #: otlp_proto / otlp_json read trace batches; otlp_logs_proto / otlp_logs_json read log
    #: batches (GenAI content sent as events, e.g. openai-v2 in EVENT_ONLY capture mode).
    format: Literal["flat_json", "otlp_proto", "otlp_json", "otlp_logs_proto",
                    "otlp_logs_json"] = "flat_json"
    #: flat_json only: TraceEvent field -> dotted path in the message (e.g. output: response.text).
    mapping: dict[str, str] = Field(default_factory=dict)
    #: otlp_*: span attribute holding the session id, tried before the standard keys.
    session_attribute: str | None = None
    #: otlp_*: resource or span attribute naming the app, tried before ``service.name``.
    app_attribute: str | None = None
    #: otlp_*: span kinds evaluated, matched (lowercased) against ``gen_ai.operation.name``,
    #: ``openinference.span.kind`` or ``llm.request.type``; other GenAI spans (tools,
    #: retrieval, agents, embeddings...) are skipped as ``not_llm``.
    llm_operations: list[str] = Field(default_factory=lambda: list(_LLM_OPERATIONS))
    #: otlp_*: extra ``TraceEvent.attributes`` name -> span or resource attribute key.
    attribute_map: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _options_of_its_format(self) -> InputTopic:
        # Each decoder reads only its own options: another format's were accepted and
        # ignored, e.g. a `mapping` on an OTLP input, whose events then lacked the fields
        # it was meant to fill. Compared with the defaults, so that check-config's
        # effective output loads again.
        if self.format == "flat_json":
            given = [name for name, value in (
                ("session_attribute", self.session_attribute),
                ("app_attribute", self.app_attribute),
                ("llm_operations", self.llm_operations != list(_LLM_OPERATIONS)),
                ("attribute_map", self.attribute_map)) if value]
            if given:
                raise ValueError(f"{', '.join(given)}: for OTLP inputs only (otlp_proto, "
                                 f"otlp_json, otlp_logs_proto, otlp_logs_json); a flat_json "
                                 f"input is read with `mapping`")
        elif self.mapping:
            raise ValueError(f"mapping: for flat_json inputs only; this {self.format} input is "
                             f"read with attribute_map, session_attribute and app_attribute")
        elif not any(op.strip() for op in self.llm_operations):
            # Every span would be skipped as not_llm: the input consumed and evaluated nothing.
            raise ValueError("llm_operations: no span kind is listed, so every span would be "
                             "skipped (not_llm); list the kinds to evaluate, or leave it unset "
                             f"for the default {list(_LLM_OPERATIONS)}")
        return self


class TopicSettings(Section):
    """Where the worker writes."""

    results: TopicName = "evalstream.results"
    dead_letter: TopicName = "evalstream.dlq"
    alerts: TopicName = "evalstream.alerts"
    #: Off when empty. Every result also written here as an OpenTelemetry event
    #: (``gen_ai.evaluation.result``, one OTLP log record per message, key = trace_id), for
    #: an OpenTelemetry Collector's Kafka receiver (``sinks/otel_results.py``).
    otel_results: str = ""
    #: How ``otel_results`` is encoded: the Collector Kafka receiver's logs ``encoding``.
    otel_encoding: Literal["otlp_proto", "otlp_json"] = "otlp_proto"

    @field_validator("otel_results")
    @classmethod
    def _otel_topic_name(cls, name: str) -> str:
        return _kafka_topic_name(name) if name else name

    @model_validator(mode="after")
    def _otel_results_is_its_own(self) -> TopicSettings:
        if not self.otel_results:
            if self.otel_encoding != "otlp_proto":
                # Accepted and ignored, it would hide that the OTel copy is off.
                raise ValueError("otel_encoding: set, but otel_results is empty (the OTel "
                                 "copy of results is off); set otel_results to a topic")
            return self
        for field, topic in self.outputs():
            if field != "otel_results" and topic == self.otel_results:
                # Consumers of either topic would read two shapes of message mixed.
                raise ValueError(f"otel_results: {self.otel_results!r} is also topics.{field}; "
                                 f"the OTel copy of results needs a topic of its own")
        return self

    def outputs(self) -> list[tuple[str, str]]:
        """Every topic the worker writes, as (field, topic): results, dead letters, alerts,
        then the OTel copy of results when it is on. The one list the checks that keep
        outputs off the inputs and the labels topic go through."""
        written = [("results", self.results), ("dead_letter", self.dead_letter),
                   ("alerts", self.alerts)]
        return [*written, ("otel_results", self.otel_results)] if self.otel_results else written
