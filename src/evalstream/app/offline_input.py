"""The input of ``evalstream eval``: JSONL files read and checked line by line into items.

Input lines are either trace events or labelled evaluation items in the ``evaldata``
schema (``{id, evaluator, input, output, criteria, role, turns, label, source}``).
An item becomes a TraceEvent whose ``app`` is the item's evaluator, so routes can pick items by
``match.app``; ``role`` becomes the system prompt, ``turns`` the earlier messages and
``criteria`` the ``criteria`` attribute. A trace-event line is decoded as the worker decodes
a message of the routed input (:func:`routed_input`): its format (``flat_json`` or one
``otlp_json`` batch per line) and field mapping, so an export of the input topic scores as
the worker would score it. Without a config it is a flat TraceEvent, normalised as
``flat_json`` does.

A bad line (not UTF-8, not JSON, not a trace event or evaldata item) is either recorded as
``file:line: reason`` and skipped, or raised as a ``ConfigError``, as the caller chooses.
"""

from __future__ import annotations

import glob
import gzip
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from evalstream.config import InputTopic, Settings
from evalstream.errors import ConfigError, DecodeError
from evalstream.events import Message, RawRecord, TraceEvent, load_json
from evalstream.formats import Decoder, decoder_for

__all__ = ["STDIN", "Item", "input_paths", "read_items", "routed_input"]

_EVALDATA_KEYS = frozenset({"id", "evaluator", "label"})
#: TraceEvent fields by the evaldata field they are built from, where the names differ.
_EVALDATA_NAMES = {"system_prompt": "role", "event_id": "id", "trace_id": "id",
                   "app": "evaluator"}
_BOM = b"\xef\xbb\xbf"
_GZIP = b"\x1f\x8b"
#: The ``--input`` that reads standard input.
STDIN = "-"


@dataclass(frozen=True, slots=True)
class Item:
    """One event to score and, for labelled data, its gold label and data set name."""

    event: TraceEvent
    gold: bool | str | None = None
    dataset: str | None = None


def input_paths(patterns: Sequence[str]) -> list[Path]:
    """The files ``--input`` names: each pattern as a path, or a glob's matches sorted.

    Raises:
        ConfigError: a glob matches no file.
    """
    paths: list[Path] = []
    for pattern in patterns:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise ConfigError(f"--input {pattern}: no file matches")
        paths.extend(Path(m) for m in matched)
    return paths


def _turns(raw: Any) -> tuple[Message, ...]:
    """evaldata ``turns``: null or a list of ``{role, content}`` objects (checked, not trusted)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"turns must be a list of {{role, content}} objects, "
                         f"not {type(raw).__name__}")
    turns = []
    for index, turn in enumerate(raw):
        if not isinstance(turn, dict):
            raise ValueError(f"turns[{index}] must be a {{role, content}} object, "
                             f"not {type(turn).__name__}")
        role, content = turn.get("role"), turn.get("content")
        if not isinstance(role, str) or not isinstance(content, str | None):
            raise ValueError(f"turns[{index}] needs a string role and content")
        if content:
            turns.append(Message(role=role, content=content))
    return tuple(turns)


def _from_evaldata(obj: dict[str, Any]) -> Item:
    turns = _turns(obj.get("turns"))
    attributes = {"dataset": str(obj["evaluator"])}
    if obj.get("criteria"):
        attributes["criteria"] = str(obj["criteria"])
    try:
        event = TraceEvent(event_id=str(obj["id"]), trace_id=str(obj["id"]),
                           app=str(obj["evaluator"]), system_prompt=obj.get("role"),
                           messages=turns, input=obj.get("input"), output=obj.get("output"),
                           attributes=attributes)
    except ValidationError as exc:
        # Named as the item names it: pydantic's first line ("1 validation error for
        # TraceEvent") named no field, and TraceEvent's names are not the item's. The
        # message says what was expected, never the value (trace content).
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "item"
        raise ValueError(f"{_EVALDATA_NAMES.get(field, field)}: {error['msg']}") from None
    label = obj.get("label")
    # Anything else but null as text (1 -> "1"): refused when compared, and counted, rather
    # than left out unsaid.
    gold = label if isinstance(label, bool | str) or label is None else str(label)
    return Item(event, gold, str(obj["evaluator"]))


#: What a line that is not an evaldata item is decoded as without ``--config`` (or when
#: the routed input's format is not JSON lines): a flat TraceEvent, normalised as the
#: worker's ``flat_json`` does (``input`` from ``messages``, ids, attributes).
_PLAIN = InputTopic(topic="eval")


def _items(raw: bytes, record: RawRecord, decoder: Decoder) -> list[Item]:
    """One line's items; raises ``ValueError`` (or a subclass) saying what is wrong.

    An evaldata item is one item; anything else is decoded as the worker decodes a message
    of the routed input (``decoder``), which may yield several events (an OTLP JSON batch)
    or none (spans the decoder skips).
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    try:
        obj = load_json(line)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    if obj.keys() >= _EVALDATA_KEYS:
        return [_from_evaldata(obj)]
    try:
        decoded = decoder(record)
    except DecodeError as exc:
        raise ValueError(f"{exc.reason}: {exc}") from None
    return [Item(event) for event in decoded.events]


def read_items(paths: Sequence[Path], bad_lines: list[str] | None = None,
               topic: InputTopic | None = None, carry: Sequence[str] = ()) -> Iterator[Item]:
    """Items from JSONL files: evaldata items or trace events, line by line.

    Args:
        paths: The files; ``-`` reads standard input. gzip data (a ``.gz`` dump, or piped)
            is decompressed; where it is cut short the rest of the file is one bad line.
        bad_lines: When given, a bad line is recorded here as ``"file:line: reason"`` and
            skipped; when omitted, it raises.
        topic: The input whose decoder (format and field mapping) reads lines that are not
            evaldata items, as the worker would; flat TraceEvents when None or when its
            format is not JSON (``otlp_proto``, ``otlp_logs_proto``).
        carry: The event attributes the configuration reads from ``topic``'s events
            (:func:`~evalstream.app.reach.attributes_read`), carried by an OTLP decoder.

    Raises:
        ConfigError: a file cannot be opened, or (without ``bad_lines``) a line is neither
            kind of item (the message names the file and line).
    """
    if topic is None or topic.format in ("otlp_proto", "otlp_logs_proto"):
        topic = _PLAIN
    decoder = decoder_for(topic, carry)
    for index, path in enumerate(paths):
        with ExitStack() as stack:
            name, handle, gzipped = _open(path, stack)
            number = 0
            try:
                for number, raw in enumerate(handle, 1):
                    yield from _line_items(raw, name, number, index, topic.topic, decoder,
                                           bad_lines)
            except (OSError, EOFError) as exc:  # gzip data cut short or corrupt, EIO
                problem = (f"{name}:{number + 1}: {'gzip data' if gzipped else 'file'} "
                           f"unreadable from here on ({exc})")
                if bad_lines is None:
                    raise ConfigError(problem) from None
                bad_lines.append(f"{problem}; the lines before it were read")


def _open(path: Path, stack: ExitStack) -> tuple[str, Iterable[bytes], bool]:
    """``path``'s name in messages, its bytes (``-``: stdin), and whether they are gzip
    data, decompressed (told by their first bytes, whatever the name)."""
    if str(path) == STDIN:
        name, handle = "<stdin>", cast("io.BufferedReader", sys.stdin.buffer)
    else:
        try:
            # Bytes, decoded line by line: one non-UTF-8 line must not end the file's reading.
            handle = stack.enter_context(path.open("rb"))
        except OSError as exc:
            raise ConfigError(f"--input {path}: {exc.strerror}") from exc
        name = str(path)
    if handle.peek(len(_GZIP))[:len(_GZIP)] == _GZIP:
        return name, stack.enter_context(gzip.GzipFile(fileobj=handle, mode="rb")), True
    return name, handle, False


def _line_items(raw: bytes, name: str, number: int, index: int, topic: str,
                decoder: Decoder, bad_lines: list[str] | None) -> list[Item]:
    """The items of line ``number`` of file ``index``; none when it is blank, or bad and
    recorded in ``bad_lines`` (without it, a bad line raises ``ConfigError``)."""
    if number == 1:
        # A UTF-8 byte order mark opens files some Windows tools write; it is not part of
        # the first line (anywhere else it is still not JSON).
        raw = raw.removeprefix(_BOM)
    if not raw.strip():
        return []
    # (file, line) stand for (partition, offset): an event without an id gets one derived
    # from them, as a Kafka message's from its position.
    record = RawRecord(topic, index, number, raw.strip())
    try:
        return _items(raw, record, decoder)
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        problem = f"{name}:{number}: not a trace event or evaldata item: {detail}"
        if bad_lines is None:
            raise ConfigError(problem) from None
        bad_lines.append(problem)
        return []


def routed_input(config: Settings | None, topic: str | None) -> InputTopic | None:
    """The input whose decoder reads trace lines: ``--topic``'s, else the config's first.

    None without a config, or when no input consumes ``topic`` (lines are then read as
    flat TraceEvents; a route may still match the topic offline).
    """
    if config is None:
        return None
    if not topic:
        return config.inputs[0]
    return next((t for t in config.inputs if t.topic == topic), None)
