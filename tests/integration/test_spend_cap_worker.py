"""A spend-capped LLM judge through the worker: error results, not a stuck or crashed worker.

The worker builds its ``openai`` judge from the config (no injection) and talks to the local
fake LLM server on a real socket. Every answered request costs exactly $1 (the server
reports 1 completion token; $1000 per 1k output tokens) against a $2 cap, with one
connection, so exactly two requests may be sent. The rest of the evaluations must be
published as error results naming the cap, the cascade evaluator must keep answering with
the builtin judge, offsets must be committed past everything, and in-flight work must drain.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import load_settings
from tests.integration.workerkit import (
    LLM_AND_CASCADE_ROUTES,
    Topics,
    capped_judges,
    config_dict,
    event_json,
    results,
    running,
    wait_committed_total,
    write_config,
)
from tests.support.broker import Broker
from tests.support.kafka import produce
from tests.support.llm_server import llm_server

pytestmark = pytest.mark.integration

EVENTS = 12


async def test_a_capped_judge_publishes_error_results_and_the_worker_keeps_up(
        broker: Broker, tmp_path: Path) -> None:
    topics = Topics.fresh("spendcap")
    await topics.create(broker.bootstrap, partitions=2)
    registry = CollectorRegistry()
    async with llm_server() as server:
        config = write_config(tmp_path / "worker.yaml", config_dict(
            broker.bootstrap, topics,
            judges=capped_judges(server.url), worker={"max_in_flight": 4},
            routes=LLM_AND_CASCADE_ROUTES))
        worker = Worker(load_settings(config), registry=registry)
        async with running(worker):
            await produce(broker.bootstrap, topics.inputs,
                          [event_json(i, refuse=i % 2 == 1) for i in range(EVENTS)])
            published = await results(broker.bootstrap, topics.results, expect=2 * EVENTS,
                                      timeout=30)
            await wait_committed_total(broker.bootstrap, topics, 2, EVENTS)
            assert registry.get_sample_value("evalstream_in_flight_evaluations") == 0
            assert registry.get_sample_value("evalstream_ready") == 1

    assert len(server.posts) == 2  # the cap: nothing more was sent
    llm = [r for r in published if r["evaluator"] == "refusal"]
    cascade = [r for r in published if r["evaluator"] == "refusal_cascade"]
    assert len(llm) == len(cascade) == EVENTS
    errors = [r for r in llm if r["status"] == "error"]
    assert len(errors) >= EVENTS - 2
    for r in errors:
        assert "judge 'llm': spend cap reached" in r["error"]
        assert "spend_cap_usd $2" in r["error"]
    # The cascade never fails for the cap: its unsure answers fall back to the builtin's.
    assert all(r["status"] == "ok" for r in cascade), [r["error"] for r in cascade]
    capped = registry.get_sample_value("evalstream_judge_requests_total",
                                       {"judge": "llm", "outcome": "capped"})
    fallbacks = registry.get_sample_value("evalstream_judge_escalations_total",
                                          {"judge": "cheap-first", "decision": "capped"}) or 0
    # Every escalation the cap refused kept the builtin's answer (it is unsure on these),
    # and each such result says so.
    assert fallbacks >= EVENTS - 2
    kept = [r for r in cascade if r["judge"]["capped"]]
    assert len(kept) == fallbacks
    assert all(r["judge"]["backend"] == "builtin" and not r["judge"]["escalated"]
               for r in kept)
    assert not [r for r in llm if r["judge"] and r["judge"]["capped"]]
    assert capped == len(errors) + fallbacks
    assert registry.get_sample_value("evalstream_judge_spend_window_usd",
                                     {"judge": "llm"}) == pytest.approx(2.0)
    peak = registry.get_sample_value("evalstream_in_flight_evaluations_peak")
    assert peak is not None
    assert peak <= 4
