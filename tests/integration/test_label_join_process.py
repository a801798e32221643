"""``evalstream join-labels`` as a real process: it serves its metrics, SIGTERM stops it
(exit 0) with what waits left uncommitted, and a restart reads that again, counting each
pair once; after SIGKILL nothing is lost and what was matched since the last commit is
counted again."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest

from evalstream.events import EvalResult, dump_json
from tests.integration.workerkit import (
    REPO,
    Topics,
    committed,
    config_dict,
    scrape,
    wait_for,
    write_config,
)
from tests.support.broker import Broker, free_port
from tests.support.kafka import create_topics, produce, unique

pytestmark = pytest.mark.integration


def result(rid: str) -> bytes:
    return dump_json(EvalResult(result_id=rid, event_id=rid, trace_id=rid, route="default",
                                evaluator="refusal", passed=True, score=0.9
                                ).model_dump(mode="json"))


def label(rid: str) -> bytes:
    return dump_json({"result_id": rid, "gold": "true"})


def spawn(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    return subprocess.Popen(
        [sys.executable, "-m", "evalstream", "join-labels", "--config", str(config)],
        env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab"), cwd=REPO)


async def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> tuple[int, float]:
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    while proc.poll() is None:
        if time.monotonic() - started > timeout:
            proc.kill()
            raise AssertionError(f"join-labels did not exit within {timeout}s")
        await asyncio.sleep(0.05)
    return proc.returncode, time.monotonic() - started


class Joiner(NamedTuple):
    """A join-labels set-up on fresh topics: its config file, metrics port, group, log."""

    topics: Topics
    labels_topic: str
    port: int
    config: Path
    group: str
    log: Path


async def joiner(broker: Broker, tmp_path: Path, name: str, **sections: Any) -> Joiner:
    """Fresh results and labels topics (one partition each) and a config for a joiner
    reading them, serving its metrics on a free port; ``sections`` add config sections."""
    topics = Topics.fresh(name)
    await topics.create(broker.bootstrap, partitions=1)
    labels_topic = unique(f"{name}-lab")
    await create_topics(broker.bootstrap, [labels_topic], partitions=1)
    port = free_port()
    data = config_dict(broker.bootstrap, topics, labels={"topic": labels_topic},
                       server={"host": "127.0.0.1", "port": port}, **sections)
    return Joiner(topics, labels_topic, port, write_config(tmp_path / "config.yaml", data),
                  f"{topics.group}.labels", tmp_path / "joiner.log")


async def test_sigterm_then_restart_reads_what_waited(broker: Broker, tmp_path: Path) -> None:
    topics, labels_topic, port, config, group, log = await joiner(broker, tmp_path,
                                                                  "labelproc")
    agreed = ("evalstream_labels_evaluations_total", {"outcome": "agreed"})
    # r0 is labelled; r1 waits for a label, "later" for its result.
    await produce(broker.bootstrap, topics.results, [result("r0"), result("r1")])
    await produce(broker.bootstrap, labels_topic, [label("r0"), label("later")])

    proc = spawn(config, log)
    try:
        await wait_for(lambda: asyncio.to_thread(scrape, port, *agreed), timeout=30,
                       what="the first pair counted")
        ready = await asyncio.to_thread(httpx.get, f"http://127.0.0.1:{port}/readyz")
        assert ready.status_code == 200
        assert await asyncio.to_thread(scrape, port, "evalstream_labels_pending",
                                       {"kind": "label"}) == 1
        code, took = await stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert code == 0, text[-2000:]
    assert took < 10
    assert "label_joiner_stopped" in text
    # Committed up to what waited: r1 (results offset 1) and "later" (labels offset 1).
    assert await committed(broker.bootstrap, group, topics.results, 1) == {0: 1}
    assert await committed(broker.bootstrap, group, labels_topic, 1) == {0: 1}

    # Restarted: r1 and "later" are read again and wait again; r0's pair is not recounted.
    proc = spawn(config, log)
    try:
        async def waiting_again() -> bool:
            pending = [await asyncio.to_thread(scrape, port, "evalstream_labels_pending",
                                               {"kind": kind}) for kind in ("label", "result")]
            return pending == [1, 1]
        await wait_for(waiting_again, timeout=30, what="the waiting entries read again")
        assert await asyncio.to_thread(scrape, port, *agreed) in (None, 0.0)
        await produce(broker.bootstrap, topics.results, [result("later")])
        await wait_for(lambda: asyncio.to_thread(scrape, port, *agreed), timeout=20,
                       what="the early label joined after the restart")
        code, _ = await stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    assert await committed(broker.bootstrap, group, labels_topic, 1) == {0: 2}


async def test_sigkill_then_restart_loses_nothing_and_recounts_uncommitted_pairs(
        broker: Broker, tmp_path: Path) -> None:
    """A crash (SIGKILL, an OOM kill) skips the final commit: what waited is read again and
    waits again (nothing lost), and a pair matched since the last commit is read again and
    counted again (README "Offsets, at least once")."""
    # No periodic commit before the kill: the crash falls between two commits.
    topics, labels_topic, port, config, group, log = await joiner(
        broker, tmp_path, "labelkill",
        worker={"commit_interval_s": 3600, "shutdown_timeout_s": 10})
    agreed = ("evalstream_labels_evaluations_total", {"outcome": "agreed"})

    async def pending() -> list[float | None]:
        return [await asyncio.to_thread(scrape, port, "evalstream_labels_pending",
                                        {"kind": kind}) for kind in ("label", "result")]

    await produce(broker.bootstrap, topics.results, [result("r0"), result("r1")])
    await produce(broker.bootstrap, labels_topic, [label("r0"), label("later")])
    proc = spawn(config, log)
    try:
        await wait_for(lambda: asyncio.to_thread(scrape, port, *agreed), timeout=30,
                       what="the first pair counted")
        async def waiting() -> bool:
            return await pending() == [1, 1]
        await wait_for(waiting, timeout=10, what="r1 and 'later' waiting")
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert await committed(broker.bootstrap, group, labels_topic, 1) == {0: 0}

    proc = spawn(config, log)
    try:
        async def again() -> bool:
            return (await pending() == [1, 1]
                    and await asyncio.to_thread(scrape, port, *agreed) == 1)
        # The new group member waits out the killed one's session (6 s here).
        await wait_for(again, timeout=60, what="r0's pair counted again, r1 and 'later' waiting")
        await produce(broker.bootstrap, topics.results, [result("later")])
        async def joined() -> bool:
            return await asyncio.to_thread(scrape, port, *agreed) == 2
        await wait_for(joined, timeout=20, what="the early label joined after the crash")
        code, _ = await stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, log.read_text()[-2000:]
    # r1 still waits for a label (results offset 1); both labels matched.
    assert await committed(broker.bootstrap, group, topics.results, 1) == {0: 1}
    assert await committed(broker.bootstrap, group, labels_topic, 1) == {0: 2}
