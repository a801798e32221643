"""Must-show 2 and 3: the worker as a real process (``python -m evalstream run``).

SIGKILL mid-stream and restart: every sampled event still gets a result (at-least-once) and
any duplicate carries the same result_id. SIGTERM with evaluations in flight: the process
drains them, commits, and exits 0 within the shutdown timeout.
"""

from __future__ import annotations

import asyncio
import select
import signal
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalstream.events import load_json
from tests.integration.slow_evaluator import MODULE as SLOW
from tests.integration.workerkit import (
    Topics,
    committed,
    config_dict,
    event_json,
    expected_sampled,
    results,
    scrape,
    settings_for,
    spawn_worker,
    wait_for,
    write_config,
)
from tests.support.broker import Broker, free_port
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration


async def _exit_code(proc: subprocess.Popen[bytes], timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"worker did not exit within {timeout}s")
        await asyncio.sleep(0.05)
    return proc.returncode


async def test_sigkill_mid_stream_then_restart_loses_nothing(broker: Broker,
                                                             tmp_path: Path) -> None:
    topics = Topics.fresh("sigkill")
    await topics.create(broker.bootstrap, partitions=3)
    port = free_port()
    sections = {
        # A short session lets the restarted member take over the killed one's partitions
        # quickly (the group waits one session timeout for the dead member).
        "kafka": {"session_timeout_ms": 2000},
        "plugins": [SLOW],
        "sampling": {"rate": 0.5},
        "worker": {"max_in_flight": 16, "commit_interval_s": 0.1},
        "server": {"host": "127.0.0.1", "port": port},
        "routes": [{"name": "main", "evaluators": [
            {"evaluator": "refusal"},
            {"evaluator": "test_slow", "params": {"delay_s": 0.02}}]}],
    }
    config = write_config(tmp_path / "worker.yaml",
                          config_dict(broker.bootstrap, topics, **sections))
    settings = settings_for(broker.bootstrap, topics, **sections)
    n = 1500
    ends = await produce(broker.bootstrap, topics.inputs,
                         [event_json(i, refuse=i % 7 == 0) for i in range(n)])
    sampled = expected_sampled(settings, [f"e{i}" for i in range(n)])

    first = spawn_worker(config, log=tmp_path / "first.log")
    try:
        async def some_committed() -> bool:
            got = await committed(broker.bootstrap, topics.group, topics.inputs, 3)
            return sum(got.values()) >= 150
        await wait_for(some_committed, timeout=40, what="the first worker to commit some work")
        progress = await committed(broker.bootstrap, topics.group, topics.inputs, 3)
        assert sum(progress.values()) < n, "too late: the worker finished before the kill"
        first.send_signal(signal.SIGKILL)
        assert await _exit_code(first, 10) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()

    second = spawn_worker(config, log=tmp_path / "second.log")
    try:
        async def all_committed() -> bool:
            got = await committed(broker.bootstrap, topics.group, topics.inputs, 3)
            return all(got[p] >= end for p, end in ends.items())
        await wait_for(all_committed, timeout=60, what="the restarted worker to reach the end")
        second.send_signal(signal.SIGTERM)
        assert await _exit_code(second, 20) == 0
    finally:
        if second.poll() is None:
            second.kill()

    published = await results(broker.bootstrap, topics.results, expect=2 * len(sampled))
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for result in published:
        key = (str(result["event_id"]), str(result["evaluator"]))
        ids[key].add(str(result["result_id"]))
        counts[key] += 1
    for evaluator in ("refusal", "test_slow"):
        covered = {e for (e, ev) in ids if ev == evaluator}
        assert covered == sampled, f"{evaluator}: {len(sampled - covered)} sampled events lost"
    assert all(len(v) == 1 for v in ids.values()), "a duplicate carried a different result_id"
    # Redelivery after the kill normally shows up as duplicates; they are legal, not required.
    assert len(published) >= 2 * len(sampled)


async def test_sigterm_drains_in_flight_work_and_exits_zero(broker: Broker,
                                                             tmp_path: Path) -> None:
    topics = Topics.fresh("sigterm")
    await topics.create(broker.bootstrap, partitions=2)
    port = free_port()
    delay = 1.5
    data = config_dict(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"max_in_flight": 10, "shutdown_timeout_s": 8},
        server={"host": "127.0.0.1", "port": port},
        routes=[{"name": "main", "evaluators": [
            {"evaluator": "refusal"},
            {"evaluator": "test_slow", "params": {"delay_s": delay}}]}])
    config = write_config(tmp_path / "worker.yaml", data)
    ends = await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(40)])

    proc = spawn_worker(config, log=tmp_path / "worker.log")
    try:
        async def busy() -> bool:
            value = await asyncio.to_thread(scrape, port, "evalstream_in_flight_evaluations")
            return value is not None and value >= 5
        await wait_for(busy, timeout=30, what="evaluations in flight")
        in_flight = await asyncio.to_thread(scrape, port, "evalstream_in_flight_evaluations")
        assert in_flight is not None
        ready = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 200
        published_before = await asyncio.to_thread(
            scrape, port, "evalstream_results_published_total", {"status": "ok"}) or 0.0
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await _exit_code(proc, 8 + 5)
        elapsed = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (tmp_path / "worker.log").read_text()
    assert code == 0, log[-2000:]
    assert elapsed < 8, f"took {elapsed:.1f}s to stop"
    assert "drain_timeout" not in log

    # Nothing in flight was lost: the evaluations in flight at SIGTERM were all published,
    # and every message below the committed position has both of its results.
    positions = await committed(broker.bootstrap, topics.group, topics.inputs, 2)
    assert sum(positions.values()) > 0
    published = await results(broker.bootstrap, topics.results)
    assert len(published) >= published_before + in_flight
    done: dict[str, set[str]] = defaultdict(set)
    for result in published:
        done[str(result["event_id"])].add(str(result["evaluator"]))
    inputs = await read_all(broker.bootstrap, topics.inputs, expect=sum(ends.values()))
    below = [load_json(r.value)["event_id"] for r in inputs  # type: ignore[attr-defined]
             if r.offset < positions[r.partition]]  # type: ignore[attr-defined]
    assert len(below) == sum(positions.values())
    assert all(done[e] == {"refusal", "test_slow"} for e in below)


async def test_second_sigint_exits_at_once(broker: Broker, tmp_path: Path) -> None:
    topics = Topics.fresh("sigint")
    await topics.create(broker.bootstrap, partitions=1)
    port = free_port()
    data = config_dict(
        broker.bootstrap, topics, plugins=[SLOW],
        worker={"shutdown_timeout_s": 30},
        server={"host": "127.0.0.1", "port": port},
        routes=[{"name": "main", "evaluators": [
            {"evaluator": "test_slow", "params": {"delay_s": 60}}]}])
    config = write_config(tmp_path / "worker.yaml", data)
    await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(3)])
    proc = spawn_worker(config, log=tmp_path / "worker.log")
    try:
        async def busy() -> bool:
            value = await asyncio.to_thread(scrape, port, "evalstream_in_flight_evaluations")
            return value is not None and value >= 1
        await wait_for(busy, timeout=30, what="an evaluation in flight")
        proc.send_signal(signal.SIGINT)  # starts a drain that would take a minute...
        await asyncio.sleep(0.3)
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)  # ...the second one means "now"
        assert await _exit_code(proc, 5) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sum((await committed(broker.bootstrap, topics.group, topics.inputs, 1)).values()) == 0


# --- a stop while starting: exit 0 promptly, one clear line, nothing consumed ------------

STOPPED_WHILE_STARTING = "worker_stopped_while_starting"


def _log_has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


async def _sigterm_when(proc: subprocess.Popen[bytes], ready: Callable[[], Any], what: str,
                        exit_within: float, interval: float = 0.05) -> tuple[int, float]:
    """Once ``ready``, SIGTERM the worker: its exit code and the seconds it took to exit."""
    try:
        await wait_for(ready, timeout=30, what=what, interval=interval)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await _exit_code(proc, exit_within)
        return code, time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()


def _stopped_cleanly(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert text.count(STOPPED_WHILE_STARTING) == 1, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    assert "worker_started" not in text


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
async def test_a_signal_while_the_worker_is_built_stops_it_before_it_connects(
        sig: str, broker: Broker, tmp_path: Path) -> None:
    # Used to die of Python's default action (SIGTERM: exit 143): handlers were installed
    # only once the worker was built.
    topics = Topics.fresh("early")
    await topics.create(broker.bootstrap, partitions=1)
    await produce(broker.bootstrap, topics.inputs, [event_json(i) for i in range(3)])
    config = write_config(tmp_path / "worker.yaml", config_dict(
        broker.bootstrap, topics, plugins=["tests.integration.signal_on_import"]))
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, env={"SELF_SIGNAL": sig}, log=log)
    try:
        assert await _exit_code(proc, 30) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    _stopped_cleanly(log)
    assert sum((await committed(broker.bootstrap, topics.group, topics.inputs, 1)).values()) == 0
    assert await results(broker.bootstrap, topics.results) == []


async def test_sigterm_while_retrying_a_closed_port_exits_zero_promptly(tmp_path: Path) -> None:
    topics = Topics.fresh("closed")
    config = write_config(tmp_path / "worker.yaml", config_dict(
        f"127.0.0.1:{free_port()}", topics, kafka={"connect_timeout_s": 120}))
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, log=log)
    code, elapsed = await _sigterm_when(proc, lambda: _log_has(log, "broker_unreachable"),
                                        "a failed connection attempt", exit_within=10)
    assert code == 0, log.read_text()[-2000:]
    assert elapsed < 2.5, f"took {elapsed:.1f}s to stop"
    _stopped_cleanly(log)


async def test_sigterm_cuts_a_connection_attempt_that_gets_no_answer(tmp_path: Path) -> None:
    # A listener that never answers (as a TLS client at a plaintext port, or dropped
    # packets): each attempt waits up to what is left of connect_timeout_s. The stop used
    # to wait for the attempt to end; with a pod's grace period shorter, that is a SIGKILL.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # never accepted: connections complete, requests get no answer
        topics = Topics.fresh("silent")
        config = write_config(tmp_path / "worker.yaml", config_dict(
            f"127.0.0.1:{silent.getsockname()[1]}", topics, kafka={"connect_timeout_s": 60}))
        log = tmp_path / "worker.log"
        proc = spawn_worker(config, log=log)
        # Readable when a connection waits in the backlog: the attempt is under way.
        code, elapsed = await _sigterm_when(
            proc, lambda: select.select([silent], [], [], 0)[0],
            "the worker's connection attempt", exit_within=30)
    assert code == 0, log.read_text()[-2000:]
    assert elapsed < 2.5, f"took {elapsed:.1f}s to stop"
    _stopped_cleanly(log)


async def test_sigterm_while_joining_the_group_exits_zero(broker: Broker, tmp_path: Path) -> None:
    # Connected to the real broker, not yet given partitions (the group join takes seconds):
    # the stop leaves the group and exits 0 without a traceback.
    topics = Topics.fresh("joining")
    await topics.create(broker.bootstrap, partitions=1)
    config = write_config(tmp_path / "worker.yaml", config_dict(broker.bootstrap, topics))
    log = tmp_path / "worker.log"
    proc = spawn_worker(config, log=log)
    code, elapsed = await _sigterm_when(proc, lambda: _log_has(log, "worker_started"),
                                        "the worker to connect", exit_within=20, interval=0.01)
    text = log.read_text(errors="replace")
    assert code == 0, text[-2000:]
    assert elapsed < 8, f"took {elapsed:.1f}s to stop"
    assert "worker_stopped" in text
    assert "Traceback" not in text
