"""Helpers for worker integration tests: settings for a test's topics, running a worker
in-process or as a subprocess, reading committed offsets and published outputs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition

from evalstream.app.worker import Worker
from evalstream.config import Settings, load_settings
from evalstream.events import TraceEvent, dump_json, load_json
from evalstream.sampling import Sampler
from tests.support.kafka import create_topics, read_all, unique

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Topics:
    """The topics and group of one test."""

    inputs: str
    results: str
    dead_letter: str
    alerts: str
    group: str

    @classmethod
    def fresh(cls, prefix: str) -> Topics:
        return cls(unique(f"{prefix}-in"), unique(f"{prefix}-res"), unique(f"{prefix}-dlq"),
                   unique(f"{prefix}-alerts"), unique(f"{prefix}-group"))

    async def create(self, bootstrap: str, partitions: int = 4) -> None:
        await create_topics(bootstrap, [self.inputs], partitions=partitions)
        await create_topics(bootstrap, [self.results, self.dead_letter, self.alerts],
                            partitions=1)


def config_dict(bootstrap: str, topics: Topics, **sections: Any) -> dict[str, Any]:
    """A config (as YAML-ready data) for these topics; ``sections`` override/extend it."""
    data: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "group_id": topics.group,
                  "session_timeout_ms": 6000},
        "inputs": [{"topic": topics.inputs}],
        "topics": {"results": topics.results, "dead_letter": topics.dead_letter,
                   "alerts": topics.alerts},
        "worker": {"commit_interval_s": 0.2, "shutdown_timeout_s": 10},
        "server": {"host": "127.0.0.1", "port": 0},
        "drift": {"enabled": False},
        "logging": {"level": "INFO"},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def settings_for(bootstrap: str, topics: Topics, **sections: Any) -> Settings:
    return load_settings(None, **config_dict(bootstrap, topics, **sections))


def write_config(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def event_json(i: int, *, refuse: bool = False) -> bytes:
    output = ("I'm sorry, but I can't help with that request." if refuse
              else f"Sure. Step {i}: open the settings page and choose 'Reset password'.")
    return dump_json({"event_id": f"e{i}", "trace_id": f"trace-{i}",
                      "input": f"How do I reset my password? ({i})", "output": output,
                      "app": "support-bot"})


def expected_sampled(settings: Settings, event_ids: Iterable[str]) -> set[str]:
    """Which of the valid events the configured sampling keeps (trace_id = trace-N)."""
    sampler = Sampler(settings.sampling)
    rate = sampler.rate_for(settings.routes[0].sample_rate)
    keep = set()
    for event_id in event_ids:
        n = event_id.removeprefix("e")
        event = TraceEvent(event_id=event_id, trace_id=f"trace-{n}")
        if sampler.sampled(sampler.fraction(event), rate):
            keep.add(event_id)
    return keep


async def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
                   interval: float = 0.05) -> None:
    """Poll an (async or sync) predicate until true; fail naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextlib.asynccontextmanager
async def running(worker: Worker, timeout: float = 20.0) -> AsyncIterator[asyncio.Task[int]]:
    """Run ``worker`` in this loop until the block ends; yields the run task (exit code)."""
    ready = asyncio.Event()
    task = asyncio.create_task(worker.run(ready))
    try:
        done, _ = await asyncio.wait({task, asyncio.create_task(ready.wait())}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            raise AssertionError(f"worker exited early with code {task.result()}")
        if not ready.is_set():
            raise AssertionError("worker did not become ready")
        yield task
    finally:
        worker.request_stop()
        await asyncio.wait_for(asyncio.shield(task), timeout=30)


async def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (read with ``committed()``; the admin call fails here)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        out = {}
        for p in range(partitions):
            offset = await consumer.committed(TopicPartition(topic, p))
            out[p] = offset if offset is not None else 0
        return out
    finally:
        await consumer.stop()


async def wait_committed_total(bootstrap: str, topics: Topics, partitions: int, total: int,
                               timeout: float = 15) -> None:
    """Until the group's committed offsets over ``partitions`` add up to ``total``."""
    async def all_committed() -> bool:
        offsets = await committed(bootstrap, topics.group, topics.inputs, partitions)
        return sum(offsets.values()) == total

    await wait_for(all_committed, timeout, "offsets committed past every event")


#: An ``openai`` judge on the fake LLM server (``tests/support/llm_server.py``, which
#: reports 1 completion token) where every answered request costs exactly $1 ($1000 per 1k
#: output tokens) against a $2 cap, one request at a time, no retries and no cache.
CAPPED_LLM: dict[str, Any] = {
    "type": "openai", "model": "m", "max_retries": 0, "timeout_s": 10, "max_concurrency": 1,
    "cache_size": 0, "price_output_per_1k": 1000.0, "spend_cap_usd": 2.0,
    "spend_cap_window_s": 3600}

#: One route scoring refusal with judge ``llm`` and again (``refusal_cascade``) with the
#: cascade ``cheap-first`` of :func:`capped_judges`.
LLM_AND_CASCADE_ROUTES: list[dict[str, Any]] = [{"name": "support", "evaluators": [
    {"evaluator": "refusal", "judge": "llm"},
    {"evaluator": "refusal", "judge": "cheap-first", "name": "refusal_cascade"},
]}]


def capped_judges(base_url: str, **llm: Any) -> dict[str, Any]:
    """Judge ``llm`` (:data:`CAPPED_LLM` at ``base_url``, updated by ``llm``) and a cascade
    ``cheap-first`` from the builtin judge to it."""
    return {"llm": {**CAPPED_LLM, "base_url": base_url, **llm},
            # min_confidence 1: escalate every answer the builtin is not sure of.
            "cheap-first": {"type": "cascade", "first": "builtin", "then": "llm",
                            "min_confidence": 1.0}}


async def results(bootstrap: str, topic: str, expect: int | None = None,
                  timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every result on ``topic`` decoded, with its headers under ``_headers``."""
    records = await read_all(bootstrap, topic, expect=expect, timeout=timeout, idle=1.0)
    out = []
    for r in records:
        value = load_json(r.value)  # type: ignore[attr-defined]
        value["_headers"] = dict(r.headers)  # type: ignore[attr-defined]
        value["_key"] = r.key  # type: ignore[attr-defined]
        out.append(value)
    return out


def spawn_worker(config: Path, *, env: dict[str, str] | None = None,
                 log: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m evalstream run --config FILE`` as a subprocess (tests/ importable).

    ``src`` comes first: the checkout under test, not whichever copy of evalstream the
    environment has installed (an editable install may point at another tree).
    """
    path = os.pathsep.join([str(REPO / "src"), str(REPO)])
    full_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
    stderr = log.open("wb") if log is not None else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "evalstream", "run", "--config", str(config)],
                            env=full_env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=REPO)


def scrape(port: int, name: str, labels: dict[str, str] | None = None) -> float | None:
    """One sample from a running worker's /metrics (None when absent or unreachable)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and (labels is None or all(
                    sample.labels.get(k) == v for k, v in labels.items())):
                return float(sample.value)
    return None
