"""Fixtures shared by every suite: the real broker is started once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import Broker, run_broker


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A Tansu broker on a free loopback port, shared by the session."""
    with run_broker(Path(tmp_path_factory.mktemp("broker"))) as b:
        yield b
