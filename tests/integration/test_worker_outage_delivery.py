"""Delivery through a broker outage with work in flight.

The broker (one of this test's own, so its data survives) is frozen with SIGSTOP while the
worker is publishing results and dead letters and commits are due, then thawed. Whatever
the worker does meanwhile (ride it out, or stop with exit 1 and be restarted), afterwards
every sampled event has its results (a duplicate only with the same ``result_id``), every
malformed message is a dead letter, and the committed offsets reach the end.

What the worker does depends on how long the outage lasts: publishes wait for their
acknowledgement (up to aiokafka's ``request_timeout_ms``), then are retried until
``kafka.connect_timeout_s``; past that the worker stops (exit 1) and its restart finishes
the work. Commits never stop it (they are retried, and cover the same offsets later).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import defaultdict
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog
from prometheus_client import CollectorRegistry

from evalstream.app import shutdown as shutdown_module
from evalstream.app.worker import Worker
from evalstream.config import Settings
from tests.integration.slow_evaluator import MODULE as SLOW
from tests.integration.workerkit import (
    Topics,
    committed,
    config_dict,
    event_json,
    expected_sampled,
    results,
    running,
    scrape,
    settings_for,
    spawn_worker,
    wait_for,
    write_config,
)
from tests.support.broker import Broker, free_port, run_broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

PARTITIONS = 2
MESSAGES = 300
#: Every BAD_EVERY-th message is malformed (a dead letter).
BAD_EVERY = 10
EVALUATORS = ("refusal", "test_slow")
#: Freezes that outlast the producer's and consumer's request timeout use this one (the
#: consumer's JoinGroup must fit in it: Tansu holds it for half the session timeout).
SHORT_REQUEST_TIMEOUT = {"session_timeout_ms": 2000, "extra": {"request_timeout_ms": 2500}}


def stream() -> list[bytes]:
    """MESSAGES messages: valid events, and every BAD_EVERY-th one not JSON."""
    return [f"not json {i}".encode() if i % BAD_EVERY == 0 else event_json(i)
            for i in range(MESSAGES)]


def sections(**kafka: Any) -> dict[str, Any]:
    """Half the events sampled, each scored by two evaluators, one slow enough to keep
    work in flight when the broker freezes."""
    return {
        "kafka": kafka,
        "plugins": [SLOW],
        "sampling": {"rate": 0.5},
        "worker": {"max_in_flight": 16, "commit_interval_s": 0.1, "shutdown_timeout_s": 4},
        "routes": [{"name": "main", "evaluators": [
            {"evaluator": "refusal"},
            {"evaluator": "test_slow", "params": {"delay_s": 0.05}}]}],
    }


async def committed_all(own: Broker, topics: Topics) -> dict[int, int]:
    return await committed(own.bootstrap, topics.group, topics.inputs, PARTITIONS)


async def wait_until_committed(own: Broker, topics: Topics, ends: dict[int, int],
                               task: asyncio.Task[int] | None = None,
                               timeout: float = 60) -> None:
    """Until the group's commits reach ``ends`` (or the worker ``task`` exits)."""
    async def at_end() -> bool:
        if task is not None and task.done():
            raise AssertionError(f"the worker exited with {task.result()}")
        return await committed_all(own, topics) == ends
    await wait_for(at_end, timeout, "committed offsets at the end", interval=0.5)


async def check_delivered(own: Broker, topics: Topics, settings: Settings,
                          ends: dict[int, int]) -> None:
    """Every sampled event has its results (duplicates only with one result_id), every
    malformed message is a dead letter, and the committed offsets reach ``ends``."""
    valid = [f"e{i}" for i in range(MESSAGES) if i % BAD_EVERY]
    sampled = expected_sampled(settings, valid)
    published = await results(own.bootstrap, topics.results, timeout=30)
    ids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in published:
        assert r["status"] == "ok", r["error"]
        ids[(r["event_id"], r["evaluator"])].add(r["result_id"])
    assert set(ids) == {(e, ev) for e in sampled for ev in EVALUATORS}
    assert all(len(one) == 1 for one in ids.values())  # a duplicate repeats its result_id
    letters = await read_all(own.bootstrap, topics.dead_letter, timeout=30, idle=1.0)
    assert {r.value for r in letters} == {  # type: ignore[attr-defined]
        f"not json {i}".encode() for i in range(0, MESSAGES, BAD_EVERY)}
    assert await committed_all(own, topics) == ends


async def freeze_mid_stream(own: Broker, worker: Worker) -> None:
    """Freeze the broker once results are out and more work is in flight."""
    published = worker.metrics.registry.get_sample_value
    await wait_for(lambda: (published("evalstream_results_published_total",
                                      {"status": "ok"}) or 0) >= 20, 20, "first results")
    await wait_for(lambda: worker.in_flight > 0, 10, "work in flight")
    own.pause()


def problems(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["log_level"] == "error" and "worker" in e["event"]]


@dataclass
class FrozenRun:
    """A worker's run through a freeze: what the checks afterwards need."""

    topics: Topics
    settings: Settings
    logs: list[MutableMapping[str, Any]]
    task: asyncio.Task[int]
    ends: dict[int, int]


@contextlib.asynccontextmanager
async def frozen_mid_stream(own: Broker, **kafka: Any) -> AsyncIterator[FrozenRun]:
    """A worker on ``own`` (``sections(**kafka)``, logs captured) fed :func:`stream`, with
    the broker frozen once results are out and work is in flight. The caller resumes it."""
    topics = Topics.fresh("freeze")
    await topics.create(own.bootstrap, partitions=PARTITIONS)
    settings = settings_for(own.bootstrap, topics, **sections(**kafka))
    worker = Worker(settings, registry=CollectorRegistry())
    with structlog.testing.capture_logs() as logs:
        async with running(worker) as task:
            ends = await produce(own.bootstrap, topics.inputs, stream())
            await freeze_mid_stream(own, worker)
            yield FrozenRun(topics, settings, logs, task, ends)


async def test_a_short_freeze_is_waited_out(tmp_path: Path) -> None:
    """Shorter than the request timeout (default 40 s): publishes and commits just wait."""
    with run_broker(tmp_path) as own:
        async with frozen_mid_stream(own) as run:
            try:
                await asyncio.sleep(3)  # the outage itself
            finally:
                own.resume()
            await wait_until_committed(own, run.topics, run.ends, run.task)
        assert run.task.result() == 0
        assert problems(run.logs) == []
        await check_delivered(own, run.topics, run.settings, run.ends)


async def test_a_freeze_past_the_request_timeout_is_ridden_through(tmp_path: Path) -> None:
    """Longer than the request timeout, shorter than ``kafka.connect_timeout_s``: the
    publishes that timed out are sent again, and the worker carries on.

    Small producer batches: a send that finds its partition's batch full waits for it to
    drain, and aiokafka ends that wait with ``KafkaTimeoutError``, which it does not mark
    retriable; that once stopped the worker after the request timeout.
    """
    with run_broker(tmp_path) as own:
        async with frozen_mid_stream(own, **SHORT_REQUEST_TIMEOUT, connect_timeout_s=30,
                                     producer_batch_bytes=1024) as run:
            logs = run.logs
            try:
                await wait_for(lambda: any(e["event"] == "publish_retrying" for e in logs),
                               10, "publishes timing out")
                await asyncio.sleep(2.5)  # one more request timeout, frozen
                assert not run.task.done(), problems(logs)
            finally:
                own.resume()
            await wait_until_committed(own, run.topics, run.ends, run.task)
        assert run.task.result() == 0
        assert problems(logs) == []
        assert any(e["event"] == "publish_recovered" for e in logs)
        await check_delivered(own, run.topics, run.settings, run.ends)


async def test_a_freeze_past_connect_timeout_stops_the_worker_and_a_restart_finishes(
        tmp_path: Path) -> None:
    """Past ``kafka.connect_timeout_s`` the worker gives up: exit 1, one error line that
    names the setting; what it had not committed is done by the next worker."""
    connect_timeout = 3.0
    with run_broker(tmp_path) as own:
        async with frozen_mid_stream(own, **SHORT_REQUEST_TIMEOUT,
                                     connect_timeout_s=connect_timeout) as run:
            frozen = time.monotonic()
            try:
                # Retried for connect_timeout_s (after a request timeout), then the stop
                # steps each wait out their share of the close budget, the broker frozen.
                await wait_for(run.task.done, 2.5 + connect_timeout + shutdown_module
                               ._CLOSE_BUDGET_S + 5, "the worker to give up")
            finally:
                own.resume()
            took = time.monotonic() - frozen
        topics, settings, ends = run.topics, run.settings, run.ends
        assert run.task.result() == 1
        [failed] = problems(run.logs)
        assert failed["event"] == "worker_failed"
        assert "kafka.connect_timeout_s" in failed["error"], failed
        assert took > connect_timeout
        assert await committed_all(own, topics) != ends  # work was left over

        worker = Worker(settings, registry=CollectorRegistry())
        async with running(worker) as task:
            await wait_until_committed(own, topics, ends, task)
        await check_delivered(own, topics, settings, ends)


async def test_sigterm_during_a_freeze_exits_within_the_shutdown_budget(
        tmp_path: Path) -> None:
    """A stop while the broker does not answer: the drain waits ``shutdown_timeout_s`` for
    work stuck publishing, then flush, commit and close share the close budget; the
    process exits (1: results were not known to be durable) instead of hanging."""
    with run_broker(tmp_path) as own:
        topics = Topics.fresh("termfreeze")
        await topics.create(own.bootstrap, partitions=PARTITIONS)
        port = free_port()
        data = sections(**SHORT_REQUEST_TIMEOUT, connect_timeout_s=60)
        data["server"] = {"host": "127.0.0.1", "port": port}
        data["worker"]["shutdown_timeout_s"] = 2
        # Slow enough that work is still publishing when the broker freezes.
        data["routes"][0]["evaluators"][1]["params"]["delay_s"] = 0.3
        config = write_config(tmp_path / "worker.yaml",
                              config_dict(own.bootstrap, topics, **data))
        settings = settings_for(own.bootstrap, topics, **data)
        shutdown_timeout = settings.worker.shutdown_timeout_s
        ends = await produce(own.bootstrap, topics.inputs, stream())
        proc = spawn_worker(config, log=tmp_path / "worker.log")
        try:
            async def busy() -> bool:
                done = await asyncio.to_thread(scrape, port, "evalstream_results_published_total",
                                               {"status": "ok"})
                return done is not None and done >= 20
            await wait_for(busy, 30, "results published")
            own.pause()
            try:
                # Work is stuck publishing when the signal comes.
                await asyncio.sleep(0.5)
                stopped = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                limit = shutdown_timeout + shutdown_module._CLOSE_BUDGET_S + 3
                while proc.poll() is None and time.monotonic() - stopped < limit:
                    await asyncio.sleep(0.05)
                took = time.monotonic() - stopped
            finally:
                own.resume()
            assert proc.poll() is not None, f"still running {took:.1f}s after SIGTERM"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        log = (tmp_path / "worker.log").read_text()
        # Exit 1: the results under way were never acknowledged (they are redone).
        assert proc.returncode == 1, log[-2000:]
        assert log.count('"worker_failed"') == 1
        assert "producer flush did not finish" in log
        assert took < limit
        with pytest.raises(httpx.HTTPError):  # the health server closed with it
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)

        worker = Worker(settings, registry=CollectorRegistry())
        async with running(worker) as task:
            await wait_until_committed(own, topics, ends, task)
        await check_delivered(own, topics, settings, ends)
