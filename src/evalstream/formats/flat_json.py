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

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from evalstream.config import InputTopic
from evalstream.errors import ConfigError, DecodeError
from evalstream.events import RawRecord, TraceEvent, load_json, stable_hash
from evalstream.formats.base import Decoded

__all__ = ["FIELDS", "FlatJsonDecoder", "make_decoder"]

#: The TraceEvent fields a mapping may name.
FIELDS: tuple[str, ...] = tuple(TraceEvent.model_fields)
_MISSING = object()


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    current: Any = data
    for part in path:
        if isinstance(current, Mapping):
            current = current.get(part, _MISSING)
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
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
    attrs: dict[str, Any] = {}
    for key, item in value.items():
        if item is None:
            continue
        # A flat string map: scalars become strings, nested values stay and fail validation.
        attrs[str(key)] = str(item).lower() if isinstance(item, bool) else (
            str(item) if isinstance(item, int | float) else item)
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


def _describe(exc: ValidationError) -> str:
    # Locations and error types only: pydantic's messages may quote the (private) input.
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'event'}: {err['type']}"
        for err in exc.errors()
    )


class FlatJsonDecoder:
    """Decodes flat JSON messages of one topic (see the module docstring)."""

    __slots__ = ("_paths", "_topic")

    def __init__(self, topic: str, paths: Mapping[str, tuple[str, ...]]) -> None:
        self._topic = topic
        self._paths = tuple(paths.items())

    def __call__(self, record: RawRecord) -> Decoded:
        """Decode one message into exactly one event, or raise ``DecodeError``."""
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
        if not isinstance(data, dict):
            raise DecodeError("not_an_object",
                              f"expected a JSON object, got {type(data).__name__}")
        fields: dict[str, Any] = {}
        for name, path in self._paths:
            found = data.get(path[0], _MISSING) if len(path) == 1 else _lookup(data, path)
            if found is not _MISSING and found is not None:
                fields[name] = found
        return Decoded(events=[self._event(fields, record)])

    def _event(self, fields: dict[str, Any], record: RawRecord) -> TraceEvent:
        if "messages" in fields:
            fields["messages"] = _messages(fields["messages"])
            if "input" not in fields and (last_user := _last(fields["messages"], "user",
                                                             final=False)):
                fields["input"] = last_user
            if "output" not in fields and (answer := _last(fields["messages"], "assistant",
                                                           final=True)):
                fields["output"] = answer
        if "output" not in fields:
            raise DecodeError("missing_output", "no output (assistant answer) in the message")
        if "attributes" in fields:
            fields["attributes"] = _attributes(fields["attributes"])
        if isinstance(fields.get("context"), str):
            fields["context"] = (fields["context"],)
        event_id = fields.get("event_id")
        if isinstance(event_id, int | str) and not isinstance(event_id, bool) and event_id != "":
            fields["event_id"] = str(event_id)
        else:
            fields["event_id"] = stable_hash(record.topic, record.partition, record.offset)
        if not fields.get("trace_id"):
            fields["trace_id"] = fields["event_id"]
        if "timestamp" not in fields and record.timestamp_ms is not None:
            fields["timestamp"] = record.timestamp_ms / 1000.0
        try:
            return TraceEvent.model_validate(fields)
        except ValidationError as exc:
            raise DecodeError("invalid_field", _describe(exc)) from None


def make_decoder(topic: InputTopic) -> FlatJsonDecoder:
    """The decoder for ``topic``, with its field mapping resolved.

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
