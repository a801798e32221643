"""``on_spend_cap: wait`` through the worker: the cap becomes lag, nothing is an error.

The worker builds its ``openai`` judge from the config and talks to the local fake LLM
server on a real socket, through the real broker. Every answered request costs exactly $1
(1 completion token at $1000 per 1k) against a $2 cap. The first test shrinks the window
to 0.6 s (below the configuration's 60 s floor, on the built settings) so it frees many
times within the test; the second keeps an hour's window and stops the worker while its
evaluations wait.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import OpenAIJudgeConfig, Settings, load_settings
from tests.integration.workerkit import (
    CAPPED_LLM,
    LLM_AND_CASCADE_ROUTES,
    Topics,
    capped_judges,
    committed,
    config_dict,
    event_json,
    results,
    running,
    wait_committed_total,
    wait_for,
    write_config,
)
from tests.support.broker import Broker
from tests.support.kafka import produce
from tests.support.llm_server import llm_server

pytestmark = pytest.mark.integration

LLM = {**CAPPED_LLM, "on_spend_cap": "wait"}


def with_window(settings: Settings, judge: str, window_s: float) -> Settings:
    """``settings`` with judge ``judge``'s spend window set to ``window_s`` (unvalidated)."""
    config = settings.judges[judge]
    assert isinstance(config, OpenAIJudgeConfig)
    judges = {**settings.judges, judge: config.model_copy(update={"spend_cap_window_s":
                                                                  window_s})}
    return settings.model_copy(update={"judges": judges})


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_waiting_cap_pauses_intake_and_evaluates_everything_once_it_frees(
        broker: Broker, tmp_path: Path) -> None:
    events = 8
    topics = Topics.fresh("spendwait")
    await topics.create(broker.bootstrap, partitions=2)
    registry = CollectorRegistry()
    async with llm_server() as server:
        config = write_config(tmp_path / "worker.yaml", config_dict(
            broker.bootstrap, topics,
            judges=capped_judges(server.url, on_spend_cap="wait"), worker={"max_in_flight": 2},
            routes=LLM_AND_CASCADE_ROUTES))
        worker = Worker(with_window(load_settings(config), "llm", 0.6), registry=registry)
        seen: dict[str, Any] = {"capped_and_paused": False}

        async def watch() -> None:
            # While the judge waits at its cap: intake paused, the worker still ready.
            while True:
                if (value(registry, "evalstream_judge_spend_cap_waiting_requests",
                          judge="llm") > 0
                        and value(registry, "evalstream_consumer_paused") == 1):
                    seen["capped_and_paused"] = True
                    seen["ready"] = value(registry, "evalstream_ready")
                await asyncio.sleep(0.01)

        async with running(worker):
            watcher = asyncio.create_task(watch())
            await produce(broker.bootstrap, topics.inputs,
                          [event_json(i, refuse=i % 2 == 1) for i in range(events)])
            published = await results(broker.bootstrap, topics.results, expect=2 * events,
                                      timeout=60)
            await wait_committed_total(broker.bootstrap, topics, 2, events)
            watcher.cancel()
            assert value(registry, "evalstream_in_flight_evaluations") == 0
            assert value(registry, "evalstream_judge_spend_cap_waiting_requests",
                         judge="llm") == 0

    assert seen["capped_and_paused"], "never saw the judge waiting with intake paused"
    assert seen["ready"] == 1  # a worker waiting for budget is healthy
    assert len(published) == 2 * events
    assert [r["error"] for r in published if r["status"] != "ok"] == []
    llm = [r for r in published if r["evaluator"] == "refusal"]
    cascade = [r for r in published if r["evaluator"] == "refusal_cascade"]
    assert sorted(r["event_id"] for r in llm) == sorted(f"e{i}" for i in range(events))
    assert all(r["judge"]["backend"] == "openai" for r in llm)
    # A cascade escalating to a waiting judge waits for its answer: none is kept capped.
    assert not [r for r in cascade if r["judge"]["capped"]]
    escalated = [r for r in cascade if r["judge"]["escalated"]]
    assert len(server.posts) == events + len(escalated)
    capped = value(registry, "evalstream_judge_requests_total", judge="llm", outcome="capped")
    assert capped >= 1
    assert value(registry, "evalstream_judge_requests_total", judge="llm",
                 outcome="error") == 0
    assert value(registry, "evalstream_judge_escalations_total", judge="cheap-first",
                 decision="capped") == 0


async def test_a_stop_cancels_evaluations_waiting_at_the_cap_and_leaves_them_uncommitted(
        broker: Broker, tmp_path: Path) -> None:
    events = 4
    topics = Topics.fresh("spendwaitstop")
    await topics.create(broker.bootstrap, partitions=1)
    registry = CollectorRegistry()
    async with llm_server() as server:
        config = write_config(tmp_path / "worker.yaml", config_dict(
            broker.bootstrap, topics,
            judges={"llm": {**LLM, "base_url": server.url, "spend_cap_usd": 1.0}},
            # A long drain: the waiting evaluations must not be what the stop waits for.
            worker={"max_in_flight": 2, "shutdown_timeout_s": 20},
            routes=[{"name": "support", "evaluators": [
                {"evaluator": "refusal", "judge": "llm"}]}]))
        worker = Worker(load_settings(config), registry=registry)
        loop = asyncio.get_running_loop()
        async with running(worker) as task:
            await produce(broker.bootstrap, topics.inputs,
                          [event_json(i) for i in range(events)])
            await wait_for(lambda: value(registry, "evalstream_judge_spend_cap_waiting_requests",
                                         judge="llm") == 2, 15, "both slots waiting at the cap")
            await wait_for(lambda: value(registry, "evalstream_consumer_paused") == 1, 5,
                           "intake paused")
            stopping = loop.time()
            worker.request_stop()
            code = await asyncio.wait_for(asyncio.shield(task), 30)
            took = loop.time() - stopping
        published = await results(broker.bootstrap, topics.results, timeout=5)
        offsets = await committed(broker.bootstrap, topics.group, topics.inputs, 1)

    assert code == 0
    assert took < 5, f"the stop waited {took:.1f}s for evaluations waiting at the cap"
    assert len(server.posts) == 1
    assert [(r["event_id"], r["status"]) for r in published] == [("e0", "ok")]
    assert offsets == {0: 1}  # the waiting ones are redelivered, not lost nor errors
