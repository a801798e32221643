"""Logging set-up: one JSON object per line, from our loggers and the libraries' alike."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from evalstream.logging import configure_logging, get_logger


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root")
def test_library_logs_are_json_lines_too(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("INFO", "json")
    logging.getLogger("aiokafka.conn").error('Unable connect to "%s": %s', "127.0.0.1:1",
                                             "refused")
    logging.getLogger("aiokafka").info("joined the group")  # library INFO: not shown
    get_logger(__name__).info("worker_started", port=9464)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["event"], e["level"]) for e in lines] == [
        ('Unable connect to "127.0.0.1:1": refused', "error"), ("worker_started", "info")]
    assert lines[0]["logger"] == "aiokafka.conn"
    assert "timestamp" in lines[0]


@pytest.mark.usefixtures("restore_root")
def test_console_logs_piped_carry_no_colour_codes(capsys: pytest.CaptureFixture[str]) -> None:
    # capsys replaces stderr with a buffer that is not a terminal, as a pipe or file is.
    configure_logging("INFO", "console")
    get_logger(__name__).warning("broker_unreachable", attempt=3)
    logging.getLogger("aiokafka.conn").error("Unable connect")
    err = capsys.readouterr().err
    assert "broker_unreachable" in err
    assert "Unable connect" in err
    assert "\x1b[" not in err
