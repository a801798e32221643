"""``evalstream demo`` end to end in a subprocess: traffic, evaluations, an alert that fires
during the injected spike and resolves after it, /metrics, and a clean exit on SIGINT.

The demo starts its own embedded broker, so this test does not use the session broker. It
takes about a minute (20 s of baseline, a 20 s spike, then the recovery).
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

EVALSTREAM = Path(sys.executable).with_name("evalstream")
SPIKE_AFTER = 20
SPIKE_DURATION = 20

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class _Lines:
    """Collects a pipe's lines on a thread so the test can wait on them with timeouts."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        for line in self.lines:
            if m := regex.search(line):
                return m
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if m := regex.search(line):
                return m
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s; got:\n"
                             + "\n".join(self.lines[-30:]))

    def rest(self, timeout: float) -> None:
        self._thread.join(timeout)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return
            if line is not None:
                self.lines.append(line)


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def test_demo_fires_and_resolves_an_alert_and_stops_cleanly_on_sigint(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTREAM_")}
    stderr_path = tmp_path / "demo.stderr"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [str(EVALSTREAM), "demo", "--rate", "12", "--spike-after", str(SPIKE_AFTER),
             "--spike-duration", str(SPIKE_DURATION), "--interval", "2", "--port", "0"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp_path,
        )
    try:
        out = _Lines(proc.stdout)
        broker_port = int(out.wait_for(r"broker \(Tansu\) at 127\.0\.0\.1:(\d+)", 30).group(1))
        metrics_url = out.wait_for(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", 10).group(1)

        # Evaluations flow, and /metrics serves the worker's counters meanwhile.
        out.wait_for(r"phase=baseline .* evaluated=\d+", 30)
        out.wait_for(r"evaluated=([1-9]\d{2,})", 30)  # at least 100 evaluations
        with urllib.request.urlopen(metrics_url, timeout=5) as resp:  # noqa: S310 - loopback
            metrics = resp.read().decode()
        assert "evalstream_evaluations_total" in metrics
        assert re.search(r'evalstream_events_decoded_total\{format="flat_json"\} [1-9]',
                         metrics), metrics[:2000]

        fired = out.wait_for(r"ALERT t\+\s*(\d+)s FIRING .* (support/topic_adherence) "
                             r"\(pass_rate_drop\)", SPIKE_AFTER + 40)
        assert int(fired.group(1)) >= SPIKE_AFTER, "fired before the spike: a false alarm"
        resolved = out.wait_for(r"ALERT t\+\s*(\d+)s RESOLVED .* support/topic_adherence "
                                r"\(pass_rate_drop\)", SPIKE_DURATION + 60)
        assert int(resolved.group(1)) >= SPIKE_AFTER + SPIKE_DURATION

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=40) == 0
        out.rest(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = "\n".join(out.lines)
    summary = re.search(r"demo stopped after \d+s: (\d+) events sent, (\d+) evaluations, "
                        r"alerts fired (\d+), resolved (\d+); worker exit code 0", text)
    assert summary, text[-3000:]
    sent, evaluations, n_fired, n_resolved = map(int, summary.groups())
    assert evaluations >= 2 * sent > 0  # the support route alone runs four evaluators
    assert n_fired >= 1
    assert n_resolved >= 1
    assert "Traceback" not in stderr_path.read_text()
    # Nothing left behind: the embedded broker went down with the demo.
    assert not _port_open(broker_port)


def _demo_running(tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    """A plain demo with its temporary files under ``tmp_path``, once its traffic runs:
    the process (its stdout pumped on a thread) and its broker's port."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTREAM_")}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.Popen(
        [str(EVALSTREAM), "demo", "--interval", "1", "--port", "0", "--plain"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path,
    )
    try:
        out = _Lines(proc.stdout)
        broker_port = int(out.wait_for(r"broker \(Tansu\) at 127\.0\.0\.1:(\d+)", 30).group(1))
        out.wait_for(r"phase=baseline", 30)
    except BaseException:
        proc.kill()
        proc.wait(10)
        raise
    return proc, broker_port


def test_a_second_ctrl_c_takes_the_embedded_broker_down_too(tmp_path: Path) -> None:
    # The broker runs in its own session (a terminal's Ctrl-C reaches the demo only), so
    # a forced exit that skipped stopping it left a Tansu process and its temporary
    # directory behind after every double Ctrl-C.
    proc, broker_port = _demo_running(tmp_path)
    try:
        assert list(tmp_path.glob("evalstream-broker-*")), "the broker's temporary directory"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)  # two signals at once are one to Python
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    deadline = time.monotonic() + 5
    while _port_open(broker_port) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _port_open(broker_port)
    assert not list(tmp_path.glob("evalstream-broker-*"))


def test_the_demo_stops_cleanly_when_its_reader_goes_away(tmp_path: Path) -> None:
    # `evalstream demo | head`: the status lines died with the pipe, the demo ran on
    # unseen until killed, then ended in a BrokenPipeError traceback.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTREAM_")}
    stderr_path = tmp_path / "demo.stderr"
    with stderr_path.open("w") as stderr:
        proc = subprocess.Popen(
            [str(EVALSTREAM), "demo", "--interval", "1", "--port", "0", "--plain"],
            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp_path,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        broker = re.search(r"broker \(Tansu\) at 127\.0\.0\.1:(\d+)", first)
        assert broker, first
        while "phase=baseline" not in proc.stdout.readline():
            pass
        proc.stdout.close()
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert "Traceback" not in stderr_path.read_text()
    assert "Exception ignored" not in stderr_path.read_text()
    assert not _port_open(int(broker.group(1)))


def test_a_closed_terminal_stops_the_demo_and_its_broker(tmp_path: Path) -> None:
    # Closing the terminal sends SIGHUP, whose default ended the demo at once: the broker,
    # in a session of its own, ran on with its temporary directory.
    proc, broker_port = _demo_running(tmp_path)
    try:
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not _port_open(broker_port)
    assert not list(tmp_path.glob("evalstream-broker-*"))
