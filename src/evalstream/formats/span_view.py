"""What an OTLP decoder hands the extractor for each span: its attributes (:class:`Attrs`,
converted lazily), the encoding-specific accessors (:class:`SpanView`), what its resource
contributes (:class:`Resource`), and the topic's extraction settings (:class:`Options`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from evalstream.config import InputTopic
from evalstream.formats.genai_messages import AttrGetter

__all__ = ["Attrs", "Options", "Resource", "SpanView", "flat_text"]

#: traceloop-sdk (OpenLLMetry) writes its standard SESSION_ID association as the last one.
_SESSION_KEYS = ("gen_ai.conversation.id", "session.id",
                 "traceloop.association.properties.session_id")
_ENVIRONMENT_KEYS = ("deployment.environment.name", "deployment.environment")


def flat_text(value: Any) -> str:
    """A flat string for an attribute value (lists comma-joined, booleans lowercase).

    An empty ``AnyValue`` (converted to None) is ``""``, i.e. no value: it was ``"None"``,
    which made every span with an empty ``gen_ai.conversation.id`` one session "None".
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(flat_text(v) for v in value if v is not None)
    if value is None:
        return ""
    return str(value)


class Attrs:
    """Raw attributes by key, with lazy conversion of values to plain Python."""

    __slots__ = ("convert", "raw")

    def __init__(self, raw: dict[str, Any], convert: Callable[[Any], Any]) -> None:
        self.raw = raw
        self.convert = convert

    def get(self, key: str) -> Any:
        """The converted value of ``key``, or ``None``."""
        raw = self.raw.get(key)
        return None if raw is None else self.convert(raw)

    def first_text(self, keys: tuple[str, ...]) -> str | None:
        """The first of ``keys`` present, as a non-empty flat string."""
        raw_get = self.raw.get
        for key in keys:
            value = raw_get(key)
            if value is not None:
                text = self.convert(value)
                if type(text) is not str:
                    text = flat_text(text)
                if text:
                    return text
        return None


@dataclass(frozen=True, slots=True)
class Options:
    """Per-topic extraction settings, resolved once from the :class:`InputTopic`."""

    llm_operations: frozenset[str]
    session_keys: tuple[str, ...]
    app_keys: tuple[str, ...]
    attribute_map: tuple[tuple[str, str], ...]

    @classmethod
    def from_topic(cls, topic: InputTopic, carry: Iterable[str] = ()) -> Options:
        """Options for ``topic``; ``carry`` names attributes read from the span or resource
        attribute of the same key (after ``attribute_map``, which may give them another)."""
        session = (topic.session_attribute,) if topic.session_attribute else ()
        same_key = tuple((name, name) for name in dict.fromkeys(carry)
                         if name not in topic.attribute_map)
        return cls(
            llm_operations=frozenset(op.lower() for op in topic.llm_operations),
            session_keys=(*session, *_SESSION_KEYS),
            app_keys=(topic.app_attribute,) if topic.app_attribute else (),
            attribute_map=(*topic.attribute_map.items(), *same_key),
        )


class Resource:
    """What a resource contributes to each of its spans' events (resolved once: a resource
    value converted per event would cost its size times the number of events)."""

    __slots__ = ("app", "environment", "mapped", "session_id")

    def __init__(self, attrs: Attrs, options: Options) -> None:
        self.app = attrs.first_text(options.app_keys) if options.app_keys else None
        if self.app is None:
            service = attrs.first_text(("service.name",))
            if service is None or service.startswith("unknown_service"):
                # Phoenix's register(project_name=...) names the app only as its project,
                # leaving the SDK's default "unknown_service:python".
                self.app = attrs.first_text(("openinference.project.name",)) or service
            else:
                self.app = service
        self.session_id = attrs.first_text(options.session_keys)
        self.environment = attrs.first_text(_ENVIRONMENT_KEYS)
        #: The topic's ``attribute_map`` values found on the resource, by output name.
        self.mapped: dict[str, str] = {}
        for out_name, key in options.attribute_map:
            value = attrs.first_text((key,))
            if value is not None:
                self.mapped[out_name] = value


class SpanView(Attrs, ABC):
    """One span as the extractor needs it: its attributes (the :class:`Attrs` part, set by
    the subclass constructor) and accessors implemented by each OTLP encoding. One object
    per span, no more: this is allocated for every span of every message."""

    __slots__ = ()

    @abstractmethod
    def ids(self) -> tuple[str, str]:
        """(trace_id, span_id) as lowercase hex; raises ``BadSpanError`` when invalid."""

    @abstractmethod
    def times(self) -> tuple[int, int]:
        """(start, end) in Unix nanoseconds (0 when unset)."""

    @abstractmethod
    def name(self) -> str:
        """The span name."""

    @abstractmethod
    def failed(self) -> bool:
        """Whether the span's status is ERROR (the call failed)."""

    @abstractmethod
    def parent_id(self) -> str:
        """The parent span id as lowercase hex, ``""`` for a root span."""

    @abstractmethod
    def has_events(self) -> bool:
        """Whether the span has events (cheap; :meth:`events` builds them)."""

    @abstractmethod
    def events(self) -> list[tuple[str, AttrGetter]]:
        """The span's events as (name, attribute getter)."""
