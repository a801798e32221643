"""The ``Settings`` model: every configuration section and the checks that span sections.

Sections of their own (Kafka, topics, routes, judges, drift) live in sibling modules; the small
top-level ones (worker, results, server, logging) are defined here with the model.
"""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from evalstream.config.drift import DriftSettings
from evalstream.config.judges import CascadeJudgeConfig, JudgeConfig, longest_call_s
from evalstream.config.kafka import KafkaSettings
from evalstream.config.routes import EvaluatorSpec, Route, SamplingSettings
from evalstream.config.section import Section
from evalstream.config.topics import InputTopic, TopicName, TopicSettings

__all__ = [
    "CanarySettings",
    "LabelSettings",
    "LoggingSettings",
    "ResultSettings",
    "ServerSettings",
    "Settings",
    "WorkerSettings",
]

#: The most judge calls one evaluation makes one after another (role_violation: role,
#: verdict, sections); bounds how long intake can wait for a slot.
_JUDGE_CALLS_IN_A_ROW = 3


class WorkerSettings(Section):
    """Limits of the worker loop."""

    #: Evaluations (event x evaluator) in flight before the consumer pauses its partitions.
    max_in_flight: int = Field(default=256, ge=1)
    #: On SIGTERM: how long to drain in-flight work before giving up on it (uncommitted).
    shutdown_timeout_s: float = Field(default=25.0, gt=0)
    #: How often completed offsets are committed.
    commit_interval_s: float = Field(default=1.0, gt=0)
    #: "first": the first matching route only; "all": every matching route.
    routing: Literal["first", "all"] = "first"
    #: Messages with a larger value are dead-lettered (reason ``too_large``) undecoded.
    max_message_bytes: int = Field(default=1_048_576, ge=1)


class ResultSettings(Section):
    """What every result carries beyond the score."""

    #: Event attributes copied into each result's ``attributes`` (e.g. ``model``,
    #: ``environment``, ``user_tier``), so results can be sliced by them downstream.
    #: Opt-in, by name: attribute values can be user data. Never metric labels (unbounded).
    #: Each value is clipped to 256 characters.
    attributes: list[str] = Field(default_factory=list, max_length=32)

    @field_validator("attributes")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        if any(not n.strip() for n in names) or len(set(names)) != len(names):
            raise ValueError("attribute names must be non-empty and listed once")
        return names


class CanarySettings(Section):
    """Canary events: gold-labelled events injected to check the judge inside the stream."""

    #: Honour the ``evalstream.canary: "true"`` event attribute: such events are evaluated
    #: whatever the sampling rate, compared with their ``evalstream.gold.<evaluator>``
    #: answers and kept out of traffic counts. Off: the attribute is ignored and marked
    #: events are sampled and counted like any other.
    enabled: bool = True


class LabelSettings(Section):
    """``evalstream join-labels``: human labels from a topic joined with published results."""

    #: The topic human labels are published to (JSON ``{"result_id", "gold"}``), keyed and
    #: partitioned like the results topic when several joiners run (README, "Human labels").
    topic: TopicName = "evalstream.labels"
    #: The joiner's consumer group; empty: ``<kafka.group_id>.labels`` (the value used is
    #: ``Settings.labels_group_id``). Never the workers' group: joining it would take their
    #: input partitions.
    group_id: str = ""
    #: How long a result waits for its label, and a label for its result (seconds since it
    #: was read); a label later than this finds nothing and counts as expired.
    retention_s: float = Field(default=3600.0, gt=0)
    #: The most results held (memory: a few hundred bytes each); the oldest go first.
    max_results: int = Field(default=100_000, ge=1)
    #: The most labels held waiting for their result; the oldest go first.
    max_labels: int = Field(default=10_000, ge=1)


class ServerSettings(Section):
    """The HTTP server for /metrics, /healthz and /readyz."""

    host: str = "0.0.0.0"  # noqa: S104 - a pod serves probes and scrapes on its IP
    port: int = Field(default=9464, ge=0, le=65535)


class LoggingSettings(Section):
    """Logs: JSON in production; trace content never logged unless asked for."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "json"
    #: Include inputs/outputs in debug logs. Off by default: traces hold user data.
    log_content: bool = False


def _default_routes() -> list[Route]:
    return [Route(name="default", evaluators=[EvaluatorSpec(evaluator="refusal")])]


class Settings(BaseSettings):
    """The whole configuration; built once at start-up and passed down, never mutated."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="EVALSTREAM_",
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    inputs: list[InputTopic] = Field(
        default_factory=lambda: [InputTopic(topic="llm.traces")], min_length=1
    )
    topics: TopicSettings = Field(default_factory=TopicSettings)
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    routes: list[Route] = Field(default_factory=_default_routes, min_length=1)
    judges: dict[str, JudgeConfig] = Field(default_factory=dict)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    drift: DriftSettings = Field(default_factory=DriftSettings)
    results: ResultSettings = Field(default_factory=ResultSettings)
    canaries: CanarySettings = Field(default_factory=CanarySettings)
    labels: LabelSettings = Field(default_factory=LabelSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    #: Python modules imported at start-up, before evaluators are built, so that they can
    #: register user-defined evaluators (``@evalstream.evaluators.register``).
    plugins: list[str] = Field(default_factory=list)

    @property
    def evaluator_labels(self) -> frozenset[str]:
        """The label of every route's evaluators (its ``name``, else its evaluator).

        What ``drift.baselines`` and ``drift.watch_labels`` name an evaluator by; one place,
        so the validator and the start-up warnings agree on what is known.
        """
        return frozenset(spec.label for route in self.routes for spec in route.evaluators)

    @property
    def labels_group_id(self) -> str:
        """The label joiner's consumer group: ``labels.group_id``, else
        ``<kafka.group_id>.labels``.

        The one value the joiner joins and the validator checks against the workers' group.
        """
        return self.labels.group_id or f"{self.kafka.group_id}.labels"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The pydantic-settings hook: environment variables, then the YAML file.

        The YAML arrives as init kwargs; listing env first makes the environment win.
        ``.env`` files and pydantic's secrets directory are not read (secret files are
        read from the config's ``*_file`` fields instead).
        """
        return env_settings, init_settings

    @model_validator(mode="after")
    def _judge_references_resolve(self) -> Settings:
        judges = {"builtin", *self.judges}
        for ri, route in enumerate(self.routes):
            for ei, spec in enumerate(route.evaluators):
                if spec.judge not in judges:
                    raise ValueError(
                        f"routes[{ri}] ({route.name}) evaluators[{ei}] ({spec.label}): judge "
                        f"{spec.judge!r} is not defined under `judges` (known: {sorted(judges)})"
                    )
        for name, judge in self.judges.items():
            if not isinstance(judge, CascadeJudgeConfig):
                continue
            for step, ref in (("first", judge.first), ("then", judge.then)):
                if ref == name:
                    raise ValueError(f"judges.{name}.{step}: a cascade cannot refer to itself")
                if ref not in judges:
                    raise ValueError(f"judges.{name}.{step}: judge {ref!r} is not defined under "
                                     f"`judges` (known: {sorted(judges)})")
        return self

    @model_validator(mode="after")
    def _poll_interval_outlasts_judge_calls(self) -> Settings:
        for name, judge in self.judges.items():
            # A cascade may call both its steps: their deadlines add up.
            longest = longest_call_s(self.judges, name) * _JUDGE_CALLS_IN_A_ROW
            what = (f"judges.{name}.deadline_s" if not isinstance(judge, CascadeJudgeConfig)
                    else f"the deadline_s of judges.{name}'s steps added")
            if longest * 1000 >= self.kafka.max_poll_interval_ms:
                raise ValueError(
                    f"kafka.max_poll_interval_ms ({self.kafka.max_poll_interval_ms}) must exceed "
                    f"{_JUDGE_CALLS_IN_A_ROW} x {what} ({longest:g} s): an "
                    f"evaluation makes up to {_JUDGE_CALLS_IN_A_ROW} judge calls in a row, "
                    f"intake can wait that long for a free slot, and a consumer that does "
                    f"not poll leaves its group")
        return self

    @model_validator(mode="after")
    def _outputs_are_not_inputs(self) -> Settings:
        # The worker would consume what it writes: a dead letter written to an input is
        # read, dead-lettered again and so on for ever (one bad message made 25 in 10 s),
        # and results or alerts read back as traces are evaluated (or dead-lettered) in turn.
        inputs = {i.topic for i in self.inputs}
        for field, topic in self.topics.outputs():
            if topic in inputs:
                raise ValueError(f"topics.{field}: {topic!r} is also an input topic (under "
                                 f"`inputs`): the worker would consume its own output, in a "
                                 f"loop; give it a topic of its own")
        return self

    @model_validator(mode="after")
    def _labels_topic_and_group_are_their_own(self) -> Settings:
        # The joiner reads the results and labels topics in one group: a labels topic that
        # is the results topic would read each result as a (bad) label, one that is an input
        # would feed labels to the workers as traces, and the workers' group would hand the
        # joiner their input partitions.
        taken = [*((f"topics.{field}", topic) for field, topic in self.topics.outputs()),
                 *(("an input topic", i.topic) for i in self.inputs)]
        for field, topic in taken:
            if topic == self.labels.topic:
                raise ValueError(f"labels.topic: {topic!r} is also {field}; human labels "
                                 f"need a topic of their own")
        if self.labels_group_id == self.kafka.group_id:
            raise ValueError(f"labels.group_id: {self.kafka.group_id!r} is the workers' group "
                             f"(kafka.group_id); the joiner needs a group of its own")
        return self

    @model_validator(mode="after")
    def _baselines_name_evaluators(self) -> Settings:
        # The drift engine looks baselines up by "route/evaluator" or "evaluator" (its
        # label): a key naming neither was accepted and never used, the detector warming
        # up instead of starting from the baseline the operator gave.
        labels = self.evaluator_labels
        pairs = {f"{route.name}/{spec.label}" for route in self.routes
                 for spec in route.evaluators}
        unknown = sorted(set(self.drift.baselines) - labels - pairs)
        if unknown:
            raise ValueError(f"drift.baselines: {unknown} name no evaluator of the routes "
                             f"(keys are 'route/evaluator' or 'evaluator', by the evaluator's "
                             f"`name` when it has one; known: {sorted(pairs)})")
        return self

    @model_validator(mode="after")
    def _sessions_sampled_whole(self) -> Settings:
        # Every event of a session must be in or out together: sampled on another key, a
        # window would hold a random share of each conversation and judge it as the whole.
        # At rate 1 on every level nothing is sampled out, whatever the key: allowed (a
        # lower rate later is refused then, with this message). An effective rate of 0
        # (a stratum, or an evaluator, turned off) leaves every event out: whole too.
        if self.sampling.key == "session_id":
            return self
        for ri, route in enumerate(self.routes):
            if route.session is None:
                continue
            whole = all(self.sampling.rate * rate * e.sample_rate in (0.0, 1.0)
                        for rate in route.sample_rates() for e in route.evaluators)
            if not whole:
                raise ValueError(
                    f"routes[{ri}] ({route.name}).session: a session window below a "
                    f"sampling rate of 1 needs sampling.key: session_id (it is "
                    f"{self.sampling.key!r}), so that a conversation's events are sampled "
                    f"in or out together")
        return self

    @model_validator(mode="after")
    def _names_listed_once(self) -> Settings:
        for field, what, names in (("routes", "route name", [r.name for r in self.routes]),
                                   ("inputs", "topic", [i.topic for i in self.inputs])):
            repeated = sorted(n for n, count in Counter(names).items() if count > 1)
            if repeated:
                raise ValueError(f"{field}: {what} listed more than once: {repeated}")
        return self

    @model_validator(mode="after")
    def _routes_reachable(self) -> Settings:
        # With ``routing: first`` an event goes to the first route it matches: a route after
        # one whose match accepts everything it accepts never gets an event. It loaded, ran
        # nothing and said nothing (its evaluators' metrics stayed empty).
        if self.worker.routing != "first":
            return self
        for later, route in enumerate(self.routes):
            for earlier, first in enumerate(self.routes[:later]):
                if first.match.covers(route.match):
                    raise ValueError(
                        f"routes[{later}] ({route.name}) is unreachable: with "
                        f"worker.routing: first, every event its match accepts goes to the "
                        f"earlier routes[{earlier}] ({first.name}), whose match accepts them "
                        f"all; put the narrower route first, or set worker.routing: all")
        return self
