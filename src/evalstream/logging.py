"""structlog set-up: JSON lines in production, key=value on a terminal.

Per-message context (topic, partition, offset, event_id) is bound with
``structlog.contextvars.bound_contextvars`` where a message is handled, and merged here.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Hashable
from typing import Generic, Literal, TypeVar

import structlog

__all__ = ["LogLimit", "LogLimits", "configure_logging", "get_logger"]

K = TypeVar("K", bound=Hashable)


def configure_logging(level: str = "INFO", fmt: Literal["json", "console"] = "json") -> None:
    """Configure structlog once at start-up; logs go to stderr.

    Libraries that log through the standard library (aiokafka, httpx) are rendered the
    same way, so a JSON log stays one JSON object per line. They log at WARNING and above
    unless the configured level is stricter: their INFO lines (group joins, connections)
    repeat what the worker logs itself.
    """
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        # Colour only on a terminal: piped into a file or ``less``, escape codes are noise.
        else structlog.dev.ConsoleRenderer(colors=_colour_terminal())
    )
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, structlog.processors.add_log_level,
                           stamp],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(logging.WARNING, logging.getLevelNamesMapping()[level]))


def _colour_terminal() -> bool:
    """Whether stderr is a terminal that wants colour (``NO_COLOR`` set means no)."""
    return sys.stderr.isatty() and not os.environ.get("NO_COLOR")


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    """A logger tagged with the module name."""
    return structlog.get_logger(name)  # type: ignore[no-any-return]


class LogLimit:
    """Bounds one kind of log line that input can repeat (a dead letter, a failing
    evaluator): a burst of ``burst`` lines, then one per ``interval_s``.

    A flood of bad messages at tens of thousands a second must not become as many log
    lines (the counters count every one). The first line let through after some were left
    out says how many (``take`` returns the number), so the log still shows the flood.
    """

    __slots__ = ("_at", "_burst", "_clock", "_interval_s", "_suppressed", "_tokens")

    def __init__(self, burst: int = 10, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._burst = float(burst)
        self._interval_s = interval_s
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._suppressed = 0

    def take(self) -> int | None:
        """None: leave this line out (it is counted). Otherwise log it, with the number of
        lines left out since the last one that went out (0: none)."""
        now = self._clock()
        tokens = min(self._burst, self._tokens + (now - self._at) / self._interval_s)
        self._at = now
        if tokens < 1.0:
            self._tokens = tokens
            self._suppressed += 1
            return None
        self._tokens = tokens - 1.0
        suppressed, self._suppressed = self._suppressed, 0
        return suppressed

    def fields(self) -> dict[str, int] | None:
        """None: leave this line out. Otherwise what the line carries besides its own
        fields: ``suppressed`` when lines were left out before it, else nothing."""
        suppressed = self.take()
        if suppressed is None:
            return None
        return {"suppressed": suppressed} if suppressed else {}


class LogLimits(Generic[K]):
    """A :class:`LogLimit` per key (a dead letter's reason, a route and evaluator), made
    on first use: a flood of one kind must not hide the lines of another. Keys must come
    from a small fixed set (the config, a closed list of reasons): each holds a limit."""

    __slots__ = ("_clock", "_limits")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._limits: dict[K, LogLimit] = {}

    def fields(self, key: K) -> dict[str, int] | None:
        """:meth:`LogLimit.fields` of ``key``'s limit."""
        limit = self._limits.get(key)
        if limit is None:
            limit = self._limits[key] = LogLimit(clock=self._clock)
        return limit.fields()
