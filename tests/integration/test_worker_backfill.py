"""Backfill: a new group with ``kafka.start_from`` evaluates the records written from that
time on, commits, and resumes from its commits afterwards (never rewinds again).

Records are stamped "now" by the producer and written in groups more than a second apart,
as live tracing traffic is: the Tansu test broker answers ListOffsets by write time, which
then agrees with the records' CreateTime (see tools/probe_offsets_for_times.py).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from tests.integration.workerkit import (
    REPO,
    Topics,
    committed,
    config_dict,
    event_json,
    results,
    running,
    settings_for,
    wait_for,
    write_config,
)
from tests.support.broker import Broker

pytestmark = pytest.mark.integration

PARTITIONS = 2
#: Tansu keeps write times to about a second: writes on either side of a start time are
#: this far from it.
_APART_S = 1.2
#: A restarted group waits for its previous member's session to expire on Tansu: short.
_KAFKA = {"session_timeout_ms": 2000}


async def _produce(bootstrap: str, topic: str, ids: range) -> dict[int, int]:
    """Write events ``e<i>`` one request each, alternating partitions; end offset by partition.

    One request each: Tansu answers ``end_offsets`` with the last batch's base offset + 1,
    so a batch of several records would make "start at the end" start inside it.
    """
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    ends: dict[int, int] = {}
    try:
        for i in ids:
            meta = await (await producer.send(topic, event_json(i), key=f"trace-{i}".encode(),
                                              partition=i % PARTITIONS))
            ends[meta.partition] = meta.offset + 1
    finally:
        await producer.stop()
    return ends


async def _run_until_committed(worker: Worker, bootstrap: str, topics: Topics,
                               ends: dict[int, int]) -> None:
    async def at_end() -> bool:
        got = await committed(bootstrap, topics.group, topics.inputs, PARTITIONS)
        return all(got[p] >= end for p, end in ends.items())

    async with running(worker):
        await wait_for(at_end, timeout=20, what="the group to commit up to the ends")


def _event_ids(found: list[dict[str, object]]) -> list[str]:
    return sorted(str(r["event_id"]) for r in found)


def _names(ids: range) -> list[str]:
    return sorted(f"e{i}" for i in ids)


async def test_backfill_starts_at_the_time_then_resumes_from_its_commits(
        broker: Broker) -> None:
    topics = Topics.fresh("backfill")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    before_all = datetime.now(UTC) - timedelta(seconds=1)
    await _produce(broker.bootstrap, topics.inputs, range(6))  # A: before the time
    await asyncio.sleep(_APART_S)
    start = datetime.now(UTC)
    await asyncio.sleep(_APART_S)
    ends = await _produce(broker.bootstrap, topics.inputs, range(6, 12))  # B: after it

    settings = settings_for(broker.bootstrap, topics, kafka={**_KAFKA, "start_from": start})
    await _run_until_committed(Worker(settings, registry=CollectorRegistry()),
                               broker.bootstrap, topics, ends)
    assert _event_ids(await results(broker.bootstrap, topics.results)) == _names(range(6, 12))

    # A restart of the same group resumes from its commits: only C is new. start_from
    # moved before A proves the commits win over it.
    ends = await _produce(broker.bootstrap, topics.inputs, range(12, 18))  # C
    settings = settings_for(broker.bootstrap, topics,
                            kafka={**_KAFKA, "start_from": before_all})
    await _run_until_committed(Worker(settings, registry=CollectorRegistry()),
                               broker.bootstrap, topics, ends)
    assert _event_ids(await results(broker.bootstrap, topics.results)) == _names(range(6, 18))


async def test_a_group_with_commits_ignores_start_from(broker: Broker) -> None:
    topics = Topics.fresh("backfill-committed")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    ends = await _produce(broker.bootstrap, topics.inputs, range(4))
    # An ordinary group, started from the earliest.
    plain = settings_for(broker.bootstrap, topics, kafka=_KAFKA)
    await _run_until_committed(Worker(plain, registry=CollectorRegistry()),
                               broker.bootstrap, topics, ends)
    ends = await _produce(broker.bootstrap, topics.inputs, range(4, 8))
    # An hour back would rewind over everything: the group's commits win, so 0-3 are not
    # evaluated twice and 4-7 once.
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    late = settings_for(broker.bootstrap, topics, kafka={**_KAFKA, "start_from": hour_ago})
    await _run_until_committed(Worker(late, registry=CollectorRegistry()),
                               broker.bootstrap, topics, ends)
    assert _event_ids(await results(broker.bootstrap, topics.results)) == _names(range(8))


async def test_start_from_after_every_record_starts_at_the_end(broker: Broker) -> None:
    topics = Topics.fresh("backfill-end")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    await _produce(broker.bootstrap, topics.inputs, range(6))
    await asyncio.sleep(_APART_S)
    settings = settings_for(broker.bootstrap, topics,
                            kafka={**_KAFKA, "start_from": datetime.now(UTC)})
    worker = Worker(settings, registry=CollectorRegistry())
    async with running(worker):
        await wait_for(lambda: all(worker.tracker.is_assigned((topics.inputs, p))
                                   for p in range(PARTITIONS)),
                       timeout=20, what="both partitions to be assigned and positioned")
        # Written after the start positions were chosen: evaluated, and nothing before.
        ends = await _produce(broker.bootstrap, topics.inputs, range(6, 8))

        async def at_end() -> bool:
            got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
            return all(got[p] >= end for p, end in ends.items())
        await wait_for(at_end, timeout=20, what="the group to commit the new records")
    assert _event_ids(await results(broker.bootstrap, topics.results)) == _names(range(6, 8))


async def test_a_backfill_job_ends_by_itself_once_caught_up(broker: Broker,
                                                             tmp_path: Path) -> None:
    # `run --until-caught-up` as a Kubernetes Job would run it: exit 0 once every partition
    # is committed up to the end it had when assigned.
    topics = Topics.fresh("backfill-job")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    await _produce(broker.bootstrap, topics.inputs, range(4))
    await asyncio.sleep(_APART_S)
    start = datetime.now(UTC)
    await asyncio.sleep(_APART_S)
    ends = await _produce(broker.bootstrap, topics.inputs, range(4, 10))
    config = write_config(tmp_path / "job.yaml", config_dict(
        broker.bootstrap, topics, kafka={**_KAFKA, "start_from": start}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "evalstream", "run", "--until-caught-up", "--config",
        str(config), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=40)
    finally:
        if proc.returncode is None:
            proc.kill()
    log = stderr.decode()
    assert proc.returncode == 0, log
    assert '"caught_up"' in log
    assert log.count('"partition_start_from"') == PARTITIONS
    got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
    assert got == ends
    assert _event_ids(await results(broker.bootstrap, topics.results)) == _names(range(4, 10))


async def test_a_backfill_job_stopped_half_way_fails_then_a_rerun_finishes(
        broker: Broker, tmp_path: Path) -> None:
    # A node drain or an eviction SIGTERMs the Job's pod. Its exit 0 made Kubernetes count
    # the Job complete with the rest of the window never scored; exit 1 has it run again.
    topics = Topics.fresh("backfill-stopped")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    ends = await _produce(broker.bootstrap, topics.inputs, range(12))
    config = write_config(tmp_path / "job.yaml", config_dict(
        broker.bootstrap, topics, kafka=_KAFKA, plugins=["tests.integration.slow_evaluator"],
        worker={"max_in_flight": 1, "commit_interval_s": 0.2, "shutdown_timeout_s": 10},
        routes=[{"name": "slow", "evaluators": [
            {"evaluator": "test_slow", "params": {"delay_s": 0.5}}]}]))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}

    async def job(*, stop: bool) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "evalstream", "run", "--until-caught-up", "--config",
            str(config), env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            if stop:  # once it has committed some, not all (0.5 s per event, 1 at a time)
                async def evaluating() -> bool:
                    got = await committed(broker.bootstrap, topics.group, topics.inputs,
                                          PARTITIONS)
                    return sum(got.values()) > 0

                await wait_for(evaluating, 30, "the Job's first commit", interval=0.2)
                proc.terminate()
            _, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
        finally:
            if proc.returncode is None:
                proc.kill()
        assert proc.returncode is not None
        return proc.returncode, stderr.decode()

    code, log = await job(stop=True)
    assert code == 1, log[-3000:]
    assert '"stopped_before_caught_up"' in log
    got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
    assert got != ends  # half-way, as the Job's retry will find it
    code, log = await job(stop=False)
    assert code == 0, log[-3000:]
    assert '"caught_up"' in log
    assert await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS) == ends
    found = {str(r["event_id"]) for r in await results(broker.bootstrap, topics.results)}
    assert found == set(_names(range(12)))
