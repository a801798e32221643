"""Fixtures shared by every suite: the real broker is started once per session."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.support.broker import Broker, run_broker


@pytest.fixture(autouse=True)
def _fresh_structlog() -> Iterator[None]:
    """Each test starts from structlog's defaults and leaves the root logger as it found it.

    A CLI test that configures logging onto pytest's capture stream would otherwise leave
    loggers (structlog's, and the root handler that renders library logs) writing to a
    stream that is closed by the time a later test logs.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A Tansu broker on a free loopback port, shared by the session."""
    with run_broker(Path(tmp_path_factory.mktemp("broker"))) as b:
        yield b
