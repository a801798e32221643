"""Header names on published messages (shared by every sink so consumers can rely on them)."""

from __future__ import annotations

from evalstream.events import SCHEMA_VERSION, Record

__all__ = ["DLQ_ERROR", "DLQ_OFFSET", "DLQ_PARTITION", "DLQ_REASON", "DLQ_TOPIC",
           "DLQ_TRUNCATED", "dead_letter_headers", "result_headers"]

DLQ_REASON = "reason"
DLQ_ERROR = "error"
DLQ_TOPIC = "source_topic"
DLQ_PARTITION = "source_partition"
DLQ_OFFSET = "source_offset"
_MAX_ERROR_BYTES = 1_000
_SCHEMA = SCHEMA_VERSION.encode()


def result_headers(route: str, evaluator: str) -> list[tuple[str, bytes]]:
    """Headers of a result message: evaluator, route and schema version."""
    return [("evaluator", evaluator.encode()), ("route", route.encode()),
            ("schema_version", _SCHEMA)]


DLQ_TRUNCATED = "truncated_size"
#: Header names the dead-letter topic's readers trust; an original header by one of these
#: names is dropped, so a message cannot pass off its own ``reason`` or ``source_offset``.
_DLQ_NAMES = frozenset((DLQ_REASON, DLQ_ERROR, DLQ_TOPIC, DLQ_PARTITION, DLQ_OFFSET,
                        DLQ_TRUNCATED))


def _bounded_utf8(text: str) -> bytes:
    """``text`` as valid UTF-8 of at most ``_MAX_ERROR_BYTES``: what cannot be encoded (a
    lone surrogate) becomes ``?`` instead of raising, which would stop the worker, and the
    cut drops a character it would split instead of leaving invalid UTF-8 in the header."""
    data = text.encode("utf-8", "replace")
    if len(data) <= _MAX_ERROR_BYTES:
        return data
    return data[:_MAX_ERROR_BYTES].decode("utf-8", "ignore").encode()


def dead_letter_headers(record: Record, reason: str, error: str, *,
                        own_headers: bool = True) -> list[tuple[str, bytes]]:
    """Headers naming why and where a dead letter came from; the original headers follow
    (unless ``own_headers`` is False), except any that use one of these names."""
    headers = [
        (DLQ_REASON, _bounded_utf8(reason)),
        (DLQ_ERROR, _bounded_utf8(error)),
        (DLQ_TOPIC, record.topic.encode()),
        (DLQ_PARTITION, str(record.partition).encode()),
        (DLQ_OFFSET, str(record.offset).encode()),
    ]
    if own_headers:
        headers.extend(h for h in record.headers if h[0] not in _DLQ_NAMES)
    return headers
