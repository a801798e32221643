"""``flat_json``: one JSON object per Kafka message, one trace event per message.

By default each ``TraceEvent`` field is read from the key of the same name; ``mapping`` in
the topic's config points a field at a dotted path instead (``output: response.text``,
``messages: request.messages``, ``trace_id: meta.0.trace``; digits index into lists).
``event_id`` is the provided id, else a hash of (topic, partition, offset), so a redelivered
message gets the same id. ``trace_id`` defaults to the event id. ``input`` and ``output``
fall back to the last user / final assistant turn in ``messages``.

Anything that is not a usable event is a ``DecodeError`` with a stable reason code
(``empty``, ``invalid_utf8``, ``invalid_json``, ``not_an_object``, ``missing_output``,
``invalid_field``) and a message that never quotes the content.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import msgspec
from pydantic import ValidationError

from evalstream.config import InputTopic
from evalstream.errors import ConfigError, DecodeError
from evalstream.events import (
    CANARY_ATTRIBUTE,
    Message,
    Record,
    TraceEvent,
    load_json,
    stable_hash,
)
from evalstream.formats.base import Decoded, record_time_ms

__all__ = ["FIELDS", "SAMPLED_OUT", "FlatJsonDecoder", "make_decoder"]

#: The TraceEvent fields a mapping may name.
FIELDS: tuple[str, ...] = tuple(TraceEvent.model_fields)
_MISSING = object()


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    current: Any = data
    for part in path:
        if isinstance(current, Mapping):
            current = current.get(part, _MISSING)
        # isdecimal, not isdigit: "²" is a digit that int() rejects.
        elif isinstance(current, list) and part.isdecimal() and int(part) < len(current):
            current = current[int(part)]
        else:
            return _MISSING
        if current is _MISSING or current is None:
            return _MISSING
    return current


def _text(content: Any) -> Any:
    """Message content as text: a string, or the text parts of an OpenAI-style part list."""
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        texts = [p for p in parts if isinstance(p, str)]
        if texts and len(texts) == len(parts):
            return "\n".join(texts)
    return content


def _messages(value: Any) -> Any:
    if not isinstance(value, list):
        return value  # let validation name the wrong type
    out: list[Any] = []
    for item in value:
        if isinstance(item, Mapping):
            content = _text(item.get("content"))
            if content is None:
                continue  # tool-call turns carry no text to judge
            out.append({"role": item.get("role"), "content": content})
        else:
            out.append(item)
    return out


def _attributes(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return value
    if all(type(item) is str for item in value.values()):
        return value  # already a flat string map (the common case): nothing to convert
    attrs: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        # A flat string map: scalars become strings, nested values stay and fail validation.
        kind = type(item)
        if kind is bool:
            item = "true" if item else "false"
        elif kind is int or kind is float:
            item = str(item)
        attrs[str(key)] = item
    return attrs


def _last(messages: Any, role: str, *, final: bool) -> str | None:
    if not isinstance(messages, list) or not messages:
        return None
    candidates = messages[-1:] if final else reversed(messages)
    for msg in candidates:
        if isinstance(msg, Mapping) and msg.get("role") == role:
            content = msg.get("content")
            return content if isinstance(content, str) else None
    return None


#: Names a validation error's location may show: the models' own field names.
_FIELD_NAMES = frozenset(TraceEvent.model_fields) | frozenset(Message.model_fields)


#: Past this many validation errors, a message names only the first wrongly typed field.
_MAX_DESCRIBED_ERRORS = 20


def _describe(exc: ValidationError, fields: Mapping[str, Any]) -> str:
    # Locations and error types only: pydantic's messages may quote the (private) input.
    # A location can hold keys taken from the message (``attributes.<key>``), which are
    # content too: anything but a field name or a list index is shown as ``*``.
    count = exc.error_count()
    if count > _MAX_DESCRIBED_ERRORS:
        # Listing them all (500,000 wrong items in a 1 MB message) took seconds on the
        # event loop and made a 14 MB error, logged with the dead letter.
        return f"{_shape_error(fields) or 'event'}: wrong type ({count} errors)"
    return "; ".join(
        f"{'.'.join(_location_part(p) for p in err['loc']) or 'event'}: {err['type']}"
        f"{_parts_hint(err['loc'], fields)}"
        for err in exc.errors()
    )


def _parts_hint(loc: tuple[str | int, ...], fields: Mapping[str, Any]) -> str:
    """Why a message's content list is no text: "string_type" alone did not say that a
    multimodal message (an image or audio part beside the text) is not judged."""
    if len(loc) != 3 or loc[0] != "messages" or loc[2] != "content" or type(loc[1]) is not int:
        return ""
    messages = fields.get("messages")
    content = messages[loc[1]].get("content") if isinstance(messages, list) and \
        loc[1] < len(messages) and isinstance(messages[loc[1]], Mapping) else None
    if not isinstance(content, list):
        return ""
    if not content:
        return " (an empty list of content parts)"
    return (" (a list of content parts is read only when every part is text: a message "
            "with an image, audio or file part is not judged on its text alone)")


def _location_part(part: str | int) -> str:
    return str(part) if type(part) is int or part in _FIELD_NAMES else "*"


#: What ``decode`` returns for an event sampling leaves out. Shared (one allocation less per
#: message on the hot path): callers must not mutate it.
SAMPLED_OUT = Decoded(skipped=Counter(sampling=1))

_STR_FIELDS = ("event_id", "trace_id", "span_id", "session_id", "app", "system_prompt", "input",
               "output", "reference")
_TIMESTAMP_TYPES = (str, int, float)


def _shape_error(fields: Mapping[str, Any]) -> str | None:
    """The first field whose JSON type TraceEvent cannot take, or None.

    The same type rules as the model (strings are strings, messages are role/content
    objects, attributes a flat map), checked with plain ``type`` tests: cheap enough to run
    on every message, so a wrongly typed message is dead-lettered whether or not it is
    sampled. Values that need parsing (timestamps) are checked by the model itself.
    """
    for name in _STR_FIELDS:
        value = fields.get(name)
        if value is not None and type(value) is not str:
            return name
    messages = fields.get("messages")
    if messages is not None:
        if type(messages) is not list:
            return "messages"
        for m in messages:
            if (type(m) is not dict or type(m.get("role")) is not str
                    or type(m.get("content")) is not str):
                return "messages"
    context = fields.get("context")
    if context is not None and (type(context) not in (list, tuple)
                                or any(type(c) is not str for c in context)):
        return "context"
    attributes = fields.get("attributes")
    if attributes is not None and (type(attributes) is not dict
                                   or any(type(v) is not str for v in attributes.values())):
        return "attributes"
    timestamp = fields.get("timestamp")
    if timestamp is not None and (type(timestamp) is bool
                                  or not isinstance(timestamp, _TIMESTAMP_TYPES)):
        return "timestamp"
    return None


class _PlainMessage(msgspec.Struct, gc=False):
    role: str
    content: str


class _PlainEvent(msgspec.Struct, gc=False):
    """A flat_json message whose every known key already has its TraceEvent type.

    Decoding into it (msgspec, in C) checks JSON syntax, that the value is an object and
    every known field's type in one pass, building only these fields: the sampling probe's
    way to reach the sampling key of the ~99% of messages a low rate leaves out, at about
    a third of the cost of parsing the object (orjson) and then checking it in Python.
    Unknown keys are skipped, as the full decoder ignores them.
    """

    output: str
    event_id: str | None = None
    trace_id: str | None = None
    span_id: str | None = None
    session_id: str | None = None
    app: str | None = None
    system_prompt: str | None = None
    input: str | None = None
    reference: str | None = None
    messages: list[_PlainMessage] | None = None
    context: list[str] | None = None
    attributes: dict[str, str] | None = None
    timestamp: str | int | float | None = None


_PLAIN = msgspec.json.Decoder(_PlainEvent)


class FlatJsonDecoder:
    """Decodes flat JSON messages of one topic (see the module docstring)."""

    __slots__ = ("_identity", "_no_output", "_paths", "_topic")

    def __init__(self, topic: str, paths: Mapping[str, tuple[str, ...]]) -> None:
        self._topic = topic
        self._paths = tuple(paths.items())
        #: No custom mapping: the raw object's keys are the field names (enables the shortcut).
        self._identity = all(path == (name,) for name, path in self._paths)
        # Names the keys read (config, never content): with a mapping (output:
        # response.text) a message holding a top-level "output" is refused, which the
        # bare "no output" left a mystery.
        output = ".".join(paths.get("output", ("output",)))
        messages = ".".join(paths.get("messages", ("messages",)))
        self._no_output = (f"no output (assistant answer) in the message: nothing at "
                           f"'{output}' and no assistant turn at '{messages}'")

    def __call__(self, record: Record) -> Decoded:
        """Decode one message into exactly one event, or raise ``DecodeError``."""
        return self.decode(record)

    def decode(self, record: Record, *, key: str = "trace_id",
               keep: Callable[[str], bool] | None = None) -> Decoded:
        """Decode one message; with ``keep``, skip events sampling would drop, cheaply.

        Args:
            record: The message.
            key: The TraceEvent field sampling hashes (``event_id`` when it is empty).
            keep: Whether an event with this key value can be sampled at all. When it says
                no, the event is counted as skipped (``sampling``) without building the
                model: the message still had to be a JSON object with an output and fields
                of the right types, so malformed messages are dead-lettered either way.
                An event carrying the canary attribute is built whatever ``keep`` says:
                the pipeline decides whether it is a canary, evaluated whatever the sampling.

        Raises:
            DecodeError: the message is not a usable event.
        """
        value = record.value
        if not value:
            raise DecodeError("empty", "the message has no value")
        try:
            data = load_json(value)
        except ValueError:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError("invalid_utf8",
                                  f"not valid UTF-8 at byte {exc.start}") from None
            raise DecodeError("invalid_json", "the value is not valid JSON") from None
        if type(data) is not dict:
            raise DecodeError("not_an_object",
                              f"expected a JSON object, got {type(data).__name__}")
        fields: dict[str, Any] = {}
        for name, path in self._paths:
            found = data.get(path[0]) if len(path) == 1 else _lookup(data, path)
            if found is not None and found is not _MISSING:
                fields[name] = found
        self._normalise(fields, record)
        if keep is not None:
            bad = _shape_error(fields)
            if bad is not None:
                raise DecodeError("invalid_field", f"{bad}: wrong type")
            if not keep(fields.get(key) or fields["event_id"]) and not _marked(fields):
                return SAMPLED_OUT
        try:
            event = TraceEvent.model_validate(fields)
        except ValidationError as exc:
            raise DecodeError("invalid_field", _describe(exc, fields)) from None
        return Decoded(events=[event])

    def sampling_keys(self, key: str, max_bytes: int,
                      ) -> Callable[[Sequence[Record]], list[str | None]] | None:
        """A function giving each plain message's sampling key value without decoding it.

        For a group of records, the function returns one item per record, in order: the
        value of ``key`` (``event_id`` when that is empty) if the message is valid as it
        stands: a JSON object whose known keys all have their TraceEvent types, with a
        string ``output`` and a non-empty key. Otherwise None, meaning "decode it fully":
        empty values and values over ``max_bytes`` (the caller's size limit), malformed
        messages (dead letters), messages that need normalising (output taken from
        ``messages``, numeric ids, scalar attributes) and keyless ones, and messages whose
        attributes hold the canary marker (``evalstream.canary``: canaries are evaluated
        whatever the sampling, so they must reach the pipeline). A message it accepts is
        one :meth:`decode` accepts with the same key, so deciding "sampled out" from its
        key loses nothing that decoding would have dead-lettered (timestamps are the
        exception, as in :meth:`decode`: their values are parsed by the model only for
        sampled events).

        One call per group of records, not per record: at low rates the worker runs this
        on every message it consumes, and the two Python calls per message of a per-record
        probe were about an eighth of that path's cost (~1.34 -> ~1.16 us per 1 KB
        message).

        Returns:
            None when the topic has a custom mapping (raw keys are not field names).
        """
        if not self._identity:
            return None
        decode = _PLAIN.decode
        get = attrgetter(key)

        def sampling_keys(records: Sequence[Record]) -> list[str | None]:
            found: list[str | None] = []
            add = found.append
            for record in records:
                value = record.value
                if not value or len(value) > max_bytes:
                    add(None)
                    continue
                # msgspec skips unknown keys without checking their UTF-8, which orjson (the
                # full decoder) rejects: check it here. ASCII (most traffic) is valid as is.
                if not value.isascii():
                    try:
                        value.decode("utf-8")
                    except UnicodeDecodeError:
                        add(None)
                        continue
                try:
                    event = decode(value)
                except Exception:
                    # Whatever the fast check cannot judge (invalid JSON, wrong types, but
                    # also msgspec's RecursionError on deeply nested input) goes to the full
                    # decoder, which turns it into a dead letter; raising here would stop
                    # the worker.
                    add(None)
                    continue
                attributes = event.attributes
                if attributes is not None and CANARY_ATTRIBUTE in attributes:
                    add(None)  # maybe a canary: never skipped undecoded
                else:
                    add(get(event) or event.event_id or None)
            return found

        return sampling_keys

    def _normalise(self, fields: dict[str, Any], record: Record) -> None:
        """Derive and coerce fields in place (ids, input/output from messages, attributes)."""
        messages = fields.get("messages")
        if messages is not None:
            messages = fields["messages"] = _messages(messages)
            if "input" not in fields and (last_user := _last(messages, "user", final=False)):
                fields["input"] = last_user
            if "output" not in fields and (answer := _last(messages, "assistant", final=True)):
                fields["output"] = answer
        if "output" not in fields:
            raise DecodeError("missing_output", self._no_output)
        attributes = fields.get("attributes")
        if attributes is not None:
            fields["attributes"] = _attributes(attributes)
        if type(fields.get("context")) is str:
            fields["context"] = (fields["context"],)
        event_id = fields.get("event_id")
        if type(event_id) is int:
            fields["event_id"] = str(event_id)
        elif type(event_id) is not str or not event_id:
            fields["event_id"] = stable_hash(record.topic, record.partition, record.offset)
        if not fields.get("trace_id"):
            fields["trace_id"] = fields["event_id"]
        if "timestamp" not in fields and (ms := record_time_ms(record.timestamp)) is not None:
            fields["timestamp"] = ms / 1000.0


def _marked(fields: Mapping[str, Any]) -> bool:
    """Whether the event's attributes hold the canary marker (it may be a canary)."""
    attributes = fields.get("attributes")
    return type(attributes) is dict and CANARY_ATTRIBUTE in attributes


def make_decoder(topic: InputTopic, carry: Iterable[str] = ()) -> FlatJsonDecoder:
    """The decoder for ``topic``, with its field mapping resolved.

    ``carry`` (the attribute names the configuration reads) needs nothing here: an event
    has every attribute its message has.

    Raises:
        ConfigError: the mapping names a field TraceEvent does not have.
    """
    unknown = sorted(set(topic.mapping) - set(FIELDS))
    if unknown:
        raise ConfigError(f"inputs ({topic.topic}).mapping: unknown TraceEvent field(s) "
                          f"{unknown}; known: {', '.join(FIELDS)}")
    for name, path in topic.mapping.items():
        if not path or any(not part for part in path.split(".")):
            raise ConfigError(f"inputs ({topic.topic}).mapping.{name}: invalid path {path!r}")
    paths = {name: tuple(topic.mapping.get(name, name).split(".")) for name in FIELDS}
    return FlatJsonDecoder(topic.topic, paths)
