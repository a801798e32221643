"""Sampling and routing rules: which events go to which evaluators."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from evalstream.config.match_values import Accepted, value_error
from evalstream.config.section import Section

__all__ = ["STRATA_FIELDS", "VERSION_PATTERN", "EvaluatorSpec", "MatchRule", "Route",
           "SamplingSettings", "SessionWindow", "Strata"]

#: What an evaluator version may be, in code (``Evaluator.version``) or in the config
#: (``EvaluatorSpec.version``): short, and without ``+``, which joins the two in results.
VERSION_PATTERN = r"^[A-Za-z0-9._-]{1,32}$"


class SamplingSettings(Section):
    """Deterministic hash sampling. Rates nest: an event sampled at 1% is also sampled at 10%."""

    #: TraceEvent field whose hash decides (trace_id keeps a trace's spans together), or
    #: ``message_key``: the Kafka message key's bytes, decided before decoding (a skipped
    #: message is never parsed); keyless messages fall back to their events' trace_id.
    key: Literal["trace_id", "event_id", "session_id", "span_id", "message_key"] = "trace_id"
    #: Applies to every route; a route's own ``sample_rate`` multiplies with it.
    rate: float = Field(default=1.0, ge=0.0, le=1.0)
    salt: str = ""


class EvaluatorSpec(Section):
    """One evaluator in a route. ``params`` are validated by the evaluator at start-up."""

    evaluator: str = Field(min_length=1)
    #: Name in results and metrics; defaults to ``evaluator``. Needed to run one twice.
    name: str | None = None
    judge: str = "builtin"
    reasons: Literal["never", "failures", "always"] = "never"
    #: Share of the route's sampled events this evaluator scores (nested: a lower rate scores
    #: a subset of what a higher one does), e.g. an expensive LLM check at 0.1 beside cheap
    #: builtin ones at 1.0 on the same route. Effective rate: global x route x this.
    sample_rate: float = Field(default=1.0, gt=0.0, le=1.0)
    params: dict[str, Any] = Field(default_factory=dict)
    #: Bump it to re-score with new result ids when the scores would change without any
    #: other setting here changing: your plugin evaluator's code, or to force a re-score
    #: (a backfill). Part of ``result_id``; results show it in ``evaluator_version``.
    #: A YAML integer (``version: 2``) is read as its text; a decimal must be quoted.
    version: str | None = Field(default=None, pattern=VERSION_PATTERN,
                                coerce_numbers_to_str=True)

    @field_validator("version", mode="before")
    @classmethod
    def _not_a_decimal(cls, value: object) -> object:
        # YAML reads ``version: 1.10`` as the float 1.1: its text would be "1.1", the id of
        # an earlier version, and the re-score would be dropped downstream as a redelivery.
        if isinstance(value, float):
            raise ValueError(f"a decimal number ({value!r}) loses its text (1.10 reads as "
                             f"1.1): quote it, e.g. version: \"1.10\"")
        return value

    @property
    def label(self) -> str:
        """The name results and metrics use."""
        return self.name or self.evaluator


class MatchRule(Section):
    """An event matches when every given condition holds (an empty rule matches all).

    Values are matched exactly, or by prefix when they end in ``*`` (``gpt-4o-mini*``,
    ``checkout-*``); a bare ``*`` accepts any value, so the field must be present. Other
    glob syntax is refused: see :mod:`evalstream.config.match_values`.
    """

    #: TraceEvent.app values (or prefixes ending in ``*``); ``"*"``: any app is set.
    app: list[str] | None = None
    #: Input topics (or prefixes) the event was read from.
    topic: list[str] | None = None
    #: attribute -> accepted value(s) or prefixes; ``"*"`` means "present".
    attributes: dict[str, str | list[str]] = Field(default_factory=dict)
    #: Require these TraceEvent fields to be non-empty, e.g. [output, system_prompt].
    requires: list[Literal["input", "output", "system_prompt", "context", "session_id",
                           "reference", "messages"]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _can_match(self) -> MatchRule:
        # An empty list of accepted values accepts nothing: the route was loaded and never
        # matched an event (the silent filter of opik#6344). Omit the key to accept all.
        empty = [name for name, values in (("app", self.app), ("topic", self.topic))
                 if values is not None and not values]
        empty += [f"attributes.{key}" for key, accepted in self.attributes.items()
                  if isinstance(accepted, list) and not accepted]
        if empty:
            raise ValueError(f"{', '.join(empty)}: an empty list accepts no value, so the "
                             f"route would never match; omit the key to accept any value "
                             f"(or \"*\" for an attribute that must be present)")
        return self

    @model_validator(mode="after")
    def _plain_values(self) -> MatchRule:
        # A glob-looking value (``gpt-*-mini``, ``gpt-4?``) matched literally would never
        # match: refused, naming the field, rather than loaded as another silent filter.
        given = [("app", self.app or ()), ("topic", self.topic or ())]
        given += [(f"attributes.{key}", [values] if isinstance(values, str) else values)
                  for key, values in self.attributes.items()]
        for field, values in given:
            for value in values:
                why = value_error(value)
                if why is not None:
                    raise ValueError(f"{field}: {why}")
        return self

    # Parsed once per rule (the settings are frozen) and read per event by the router.
    _PARSED: ClassVar[tuple[str, ...]] = ("accepted_app", "accepted_topic",
                                          "accepted_attributes")

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> MatchRule:
        """A copy; the parsed values are dropped, as ``update`` may change what they hold."""
        copy = super().model_copy(update=update, deep=deep)
        for name in self._PARSED:  # cached_property keeps them in the instance's __dict__
            copy.__dict__.pop(name, None)
        return copy

    @cached_property
    def accepted_app(self) -> Accepted | None:
        """What ``app`` accepts; None: any event, with or without an app."""
        return None if self.app is None else Accepted.parse(self.app)

    @cached_property
    def accepted_topic(self) -> Accepted | None:
        """What ``topic`` accepts; None: any topic."""
        return None if self.topic is None else Accepted.parse(self.topic)

    @cached_property
    def accepted_attributes(self) -> tuple[tuple[str, Accepted], ...]:
        """Each attribute condition: its name and the values it accepts."""
        return tuple((key, Accepted.parse(values)) for key, values in self.attributes.items())

    def covers(self, other: MatchRule) -> bool:
        """Whether every event (from any topic) matching ``other`` also matches this rule.

        Decided from the rules alone, conservatively: False unless certain. With ``routing:
        first`` a route whose rule an earlier route's covers can never receive an event.
        A prefix covers the values and longer prefixes starting with it (``a*`` covers
        ``abc`` and ``ab*``); exact values never cover a prefix.
        """
        for mine, theirs in ((self.accepted_app, other.accepted_app),
                             (self.accepted_topic, other.accepted_topic)):
            # ``theirs`` None also takes events this field's ``*`` refuses (no app).
            if mine is not None and (theirs is None or not mine.covers(theirs)):
                return False
        their_attributes = dict(other.accepted_attributes)
        for key, accepted in self.accepted_attributes:
            theirs_value = their_attributes.get(key)
            if theirs_value is None or not accepted.covers(theirs_value):
                return False  # unset there: ``other`` takes events without the attribute
        return set(self.requires) <= set(other.requires)


class SessionWindow(Section):
    """A route's session window: its events with a ``session_id`` are evaluated once per
    conversation, as one merged event, when the session goes quiet (``app/sessions.py``)."""

    #: Seconds without a new event (wall clock since the session's last one was read, less
    #: time intake was paused for backpressure, when nothing is read) before the session is
    #: evaluated. Commits of its partitions wait for it: lag rises by up to this.
    gap_s: float = Field(default=120.0, gt=0.0, le=86_400.0)
    #: A session reaching this many events is evaluated at once; later ones start a new part.
    max_events: int = Field(default=50, ge=2, le=10_000)
    #: A session open this long (since its first event was read, counted as ``gap_s``) is
    #: evaluated even if still active: the longest a session holds its partition's commits
    #: back (a restart or rebalance that re-reads it counts again).
    max_age_s: float = Field(default=900.0, gt=0.0, le=86_400.0)
    #: Sessions open at once on this route; when full, the one quiet for longest is
    #: evaluated early (``closed: capacity`` in its result), never dropped.
    max_open: int = Field(default=10_000, ge=1)
    #: Memory held by this route's open sessions: their decoded events, about 2 KB each plus
    #: their text (several times their messages' bytes); past it, the sessions quiet for
    #: longest are evaluated early, as for ``max_open``. One session holds at most
    #: ``worker.max_message_bytes`` of messages (then it is evaluated: ``closed: bytes``).
    max_bytes: int = Field(default=67_108_864, ge=1)


#: ``Strata.by`` values naming a TraceEvent field (the topic: the input it was read from)
#: rather than an event attribute.
STRATA_FIELDS = ("app", "topic")


class Strata(Section):
    """Per-stratum sampling rates of a route: an event whose ``by`` value is listed in
    ``rates`` is sampled at that rate in place of the route's ``sample_rate``.

    One route then samples each tenant (model, topic, ...) at its own rate, where it took
    a copy of the route per stratum. Results carry the rate they were sampled at, so
    weighted counts and pass rates stay unbiased over the mixed population.
    """

    #: ``app`` or ``topic`` (the event's app, the topic it was read from), else the name of
    #: an event attribute, e.g. ``tenant`` or ``gen_ai.request.model``.
    by: str
    #: Stratum value -> its rate (global x this x an evaluator's own, as the route's); 0
    #: turns the stratum off. Unlisted values, and events without one, take the route's
    #: ``sample_rate``. Bounded: the evaluations of each are built once, at start-up.
    rates: dict[str, Annotated[float, Field(ge=0.0, le=1.0)]] = Field(min_length=1,
                                                                       max_length=10_000)

    @field_validator("by")
    @classmethod
    def _named(cls, by: str) -> str:
        # pydantic's own words for a blank one ("String should match pattern '\S'") did
        # not say what belongs here.
        if not by.strip():
            raise ValueError("empty: name what picks an event's stratum: app, topic, or an "
                             "event attribute (e.g. tenant)")
        return by

    @field_validator("rates", mode="before")
    @classmethod
    def _text_values(cls, value: object) -> object:
        if isinstance(value, dict) and not value:
            raise ValueError("no stratum listed: give at least one `value: rate`, or remove "
                             "strata")
        # YAML reads `rates: {42: 0.5}` (a numeric tenant id) with an int key, `yes`/`true`
        # with a bool one; pydantic's "Input should be a valid string" at `rates.1.[key]`
        # (True shows as 1) hid why. Stratum values are compared with the event's text.
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    kind = ("a boolean" if isinstance(key, bool) else "null" if key is None
                            else "a number" if isinstance(key, int | float)
                            else type(key).__name__)
                    raise ValueError(f"key {key!r} reads as {kind} in YAML, not text: "
                                     f"stratum values are compared with the event's text, "
                                     f"so quote each as written, e.g. \"42\": 0.5 or "
                                     f"\"true\": 1.0")
            # Beside match values, where a trailing ``*`` is a prefix, ``checkout-*: 0.1``
            # reads as one; compared exactly it would never apply (no warning either: a
            # prefix match accepts the text itself).
            starred = sorted(key for key in value if isinstance(key, str) and "*" in key)
            if starred:
                raise ValueError(f"{starred}: stratum values are matched exactly, not as "
                                 f"patterns (a trailing \"*\" is a prefix only in match "
                                 f"values): list each value; those not listed take the "
                                 f"route's sample_rate")
        return value


class Route(Section):
    """A named rule: matching events, sampled at ``sample_rate``, go to ``evaluators``."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    match: MatchRule = Field(default_factory=MatchRule)
    #: The route's rate; with ``strata``, the rate of the strata it does not list.
    sample_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    #: Optional per-stratum rates (by tenant, model, app, topic, ...): see :class:`Strata`.
    strata: Strata | None = None
    evaluators: list[EvaluatorSpec] = Field(min_length=1)
    #: Opt-in: evaluate this route's events per conversation (below a sampling rate of 1
    #: it needs ``sampling.key: session_id``, so a session's events are sampled in or out
    #: together). Unset: each event on its own.
    session: SessionWindow | None = None

    @model_validator(mode="after")
    def _unique_labels(self) -> Route:
        labels = [spec.label for spec in self.evaluators]
        dupes = sorted({x for x in labels if labels.count(x) > 1})
        if dupes:
            raise ValueError(f"evaluator names must be unique in a route; repeated: {dupes} "
                             "(give each a distinct `name`)")
        return self

    def sample_rates(self) -> list[float]:
        """Every rate the route samples at: its ``sample_rate``, then its strata's."""
        return [self.sample_rate, *(self.strata.rates.values() if self.strata else ())]
