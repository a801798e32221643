"""structlog set-up: JSON lines in production, key=value on a terminal.

Per-message context (topic, partition, offset, event_id) is bound with
``structlog.contextvars.bound_contextvars`` where a message is handled, and merged here.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Literal

import structlog

__all__ = ["configure_logging", "get_logger"]


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
