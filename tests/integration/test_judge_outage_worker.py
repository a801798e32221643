"""An LLM judge that goes away mid-stream, through the worker, on a real broker and socket.

The judge (``tests/support/llm_server.py``) answers every event, then for a few seconds
returns 503, hangs, or refuses connections, then comes back. Meanwhile work is held as
lag: evaluations wait (the circuit breaker opens, requests wait for it), in-flight work
stops at ``worker.max_in_flight`` and the consumer pauses. Afterwards every event has one
result with the judge's real answer: nothing was scored from the outage. A judge that
rate limits (429 with Retry-After) is waited out the same way, through judge-wide pauses,
whatever ``max_retries`` says. An outage past a judge's budget (``deadline_s``; or
``max_retries`` for rate limiting with ``rate_limit_retry: max_retries``) is published as
error results, named and counted as such.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import load_settings
from tests.integration.workerkit import (
    Topics,
    committed,
    config_dict,
    event_json,
    results,
    running,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce
from tests.support.llm_server import FakeLLM, llm_server

pytestmark = pytest.mark.integration

EVENTS = 120
PARTITIONS = 2
MAX_IN_FLIGHT = 6
OUTAGE_S = 3.0


def decide(body: dict[str, Any]) -> dict[str, float]:
    """The "model": refusals (every third event) are judged as such."""
    text = "\n".join(m["content"] for m in body["messages"])
    return {"yes": 0.9, "no": 0.1} if "I can't help" in text else {"no": 0.95, "yes": 0.05}


def judge_config(server: FakeLLM, **overrides: Any) -> dict[str, Any]:
    return {"type": "openai", "base_url": server.url, "model": "judge-m", "timeout_s": 0.5,
            "max_concurrency": 4, "backoff_base_s": 0.05, "backoff_max_s": 0.3,
            "circuit_failures": 3, "circuit_reset_s": 0.5, **overrides}


def make_worker(broker: Broker, topics: Topics, judge: dict[str, Any],
                shutdown_timeout_s: float = 5, **kafka: Any) -> Worker:
    settings = load_settings(None, **config_dict(
        broker.bootstrap, topics, judges={"llm": judge},
        # Few records per poll, so what waits stays in Kafka and shows as lag.
        kafka={"max_poll_records": 10, **kafka},
        worker={"max_in_flight": MAX_IN_FLIGHT, "commit_interval_s": 0.2,
                "shutdown_timeout_s": shutdown_timeout_s},
        routes=[{"name": "main", "evaluators": [{"evaluator": "refusal", "judge": "llm"}]}]))
    return Worker(settings, registry=CollectorRegistry())


async def go_down(server: FakeLLM, fault: str) -> None:
    if fault == "refused":
        await server.stop()  # open connections dropped, new ones refused
    else:
        server.always = fault  # "timeout": answers after timeout_delay_s, past timeout_s


async def come_back(server: FakeLLM, fault: str) -> None:
    if fault == "refused":
        await server.start()
    else:
        server.always = None


def sample(worker: Worker, name: str, **labels: str) -> float:
    return worker.metrics.registry.get_sample_value(name, labels) or 0.0


def check_answer(r: dict[str, Any]) -> None:
    """An ok result carries the judge's answer for its own event, never a made-up one."""
    assert r["status"] == "ok", r["error"]
    refused = int(r["event_id"].removeprefix("e")) % 3 == 0
    assert (r["label"], r["passed"]) == (("refused", False) if refused
                                         else ("not_refused", True))


async def wait_held_as_lag(worker: Worker, topics: Topics, judge_waiting: str,
                           what: str) -> None:
    """Backpressure: every slot waits for the judge, intake paused, the rest is lag; and
    the judge's metric ``judge_waiting`` (for judge ``llm``) shows what it waits on."""
    await wait_for(lambda: worker.in_flight == MAX_IN_FLIGHT and worker.slots.paused,
                   10, "intake paused at max_in_flight")
    assert sample(worker, "evalstream_consumer_paused") == 1
    await wait_for(lambda: sample(worker, judge_waiting, judge="llm") > 0, 5, what)
    await wait_for(lambda: sum(sample(
        worker, "evalstream_consumer_lag_messages", topic=topics.inputs,
        partition=str(p)) for p in range(PARTITIONS)) > 0, 5, "consumer lag")


async def run_through_outage(broker: Broker, server: FakeLLM, fault: str, judge: dict[str, Any],
                             during: Any = None) -> tuple[Worker, list[dict[str, Any]]]:
    """Stream EVENTS events, take the judge down once some are answered, bring it back
    after OUTAGE_S; the worker's state and every published result once all are committed."""
    topics = Topics.fresh("judgeout")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    worker = make_worker(broker, topics, judge)
    async with running(worker) as task:
        ends = await produce(broker.bootstrap, topics.inputs,
                             [event_json(i, refuse=i % 3 == 0) for i in range(EVENTS)])
        await wait_for(lambda: sample(worker, "evalstream_results_published_total",
                                      status="ok") >= 20, 20, "first results")
        await go_down(server, fault)
        try:
            if during is not None:
                await during(worker, topics)
            await asyncio.sleep(OUTAGE_S)
        finally:
            await come_back(server, fault)

        async def caught_up() -> bool:
            assert not task.done(), f"the worker exited with {task.result()}"
            return await committed(broker.bootstrap, topics.group, topics.inputs,
                                   PARTITIONS) == ends
        await wait_for(caught_up, 60, "commits at the end", interval=0.5)
    assert task.result() == 0
    published = await results(broker.bootstrap, topics.results, expect=EVENTS)
    ids: dict[str, set[str]] = {}
    for r in published:
        ids.setdefault(r["event_id"], set()).add(r["result_id"])
    assert set(ids) == {f"e{i}" for i in range(EVENTS)}  # every event has its result
    assert all(len(one) == 1 for one in ids.values())  # (a redelivery repeats its id)
    return worker, published


@pytest.mark.parametrize("fault", ["503", "timeout", "refused"])
async def test_a_judge_outage_is_held_as_lag_and_caught_up(broker: Broker, fault: str) -> None:
    async def held(worker: Worker, topics: Topics) -> None:
        await wait_held_as_lag(worker, topics, "evalstream_judge_circuit_state",
                               "the circuit opening")

    async with llm_server(decide=decide, timeout_delay_s=2.0) as server:
        worker, published = await run_through_outage(
            broker, server, fault, judge_config(server, max_retries=20, deadline_s=60),
            during=held)
    for r in published:
        check_answer(r)
    assert worker.in_flight_peak == MAX_IN_FLIGHT
    assert sample(worker, "evalstream_judge_requests_total", judge="llm", outcome="retry") > 0
    assert sample(worker, "evalstream_judge_circuit_state", judge="llm") == 0
    assert sample(worker, "evalstream_consumer_paused") == 0
    assert sample(worker, "evalstream_results_published_total", status="error") == 0


async def test_a_rate_limited_judge_is_held_as_lag_and_caught_up(broker: Broker) -> None:
    """429s for OUTAGE_S with max_retries 2 (this published error results): each request
    is retried until its deadline (60 s), the judge pauses judge-wide on Retry-After, the
    slots fill, intake pauses and the period is lag; afterwards every event has the
    judge's answer."""
    async def held(worker: Worker, topics: Topics) -> None:
        await wait_held_as_lag(worker, topics,
                               "evalstream_judge_rate_limit_paused_seconds_total",
                               "the judge-wide pause")
        # A 429 is an answer: the breaker stays closed.
        assert sample(worker, "evalstream_judge_circuit_state", judge="llm") == 0

    async with llm_server(decide=decide, retry_after="0.2") as server:
        worker, published = await run_through_outage(
            broker, server, "429", judge_config(server, max_retries=2, deadline_s=60),
            during=held)
    for r in published:
        check_answer(r)
    assert worker.in_flight_peak == MAX_IN_FLIGHT
    assert sample(worker, "evalstream_judge_requests_total", judge="llm",
                  outcome="rate_limited") > 0
    assert sample(worker, "evalstream_results_published_total", status="error") == 0
    assert sample(worker, "evalstream_consumer_paused") == 0


@pytest.mark.parametrize(("fault", "budget", "named", "counted"), [
    # Down past deadline_s: the waiting evaluations give up at their deadline.
    ("refused", {"deadline_s": 1.0, "max_retries": 20}, ("no answer within the 1s deadline",),
     "deadline"),
    # Rate limited past deadline_s: the error names the 429 it waited on.
    ("429", {"deadline_s": 1.0, "max_retries": 2},
     ("no answer within the 1s deadline", "HTTP 429"), "deadline"),
    # Rate limited past max_retries, when 429s are counted as retries (they are answers:
    # the breaker stays closed).
    ("429", {"deadline_s": 60, "max_retries": 2, "rate_limit_retry": "max_retries"},
     ("HTTP 429", "after 3 attempts"), "error"),
], ids=["down_past_deadline", "rate_limited_past_deadline", "rate_limited_past_retries"])
async def test_an_outage_past_the_judges_budget_publishes_named_error_results(
        broker: Broker, fault: str, budget: dict[str, Any], named: tuple[str, ...],
        counted: str) -> None:
    async with llm_server(decide=decide, retry_after="0.2") as server:
        worker, published = await run_through_outage(
            broker, server, fault, judge_config(server, **budget))
    errors = [r for r in published if r["status"] == "error"]
    assert errors
    for r in errors:
        # An error is never a verdict: no score, label or pass/fail to be read as one.
        assert (r["score"], r["label"], r["passed"]) == (None, None, None)
        assert r["error"].startswith("judge: "), r["error"]
        assert all(n in r["error"] for n in named), r["error"]
    for r in published:
        if r["status"] == "ok":
            check_answer(r)
    # Counted alike everywhere an operator looks.
    n = len(errors)
    assert sample(worker, "evalstream_results_published_total", status="error") == n
    assert sample(worker, "evalstream_evaluations_total", route="main", evaluator="refusal",
                  outcome="error") == n
    assert sample(worker, "evalstream_judge_requests_total", judge="llm", outcome=counted) == n


async def test_a_stop_while_the_judge_is_down_abandons_the_waiting_work_for_a_restart(
        broker: Broker) -> None:
    """SIGTERM with every slot waiting for a judge that refuses connections: the waiting
    evaluations (at the open circuit, or backing off before a retry) are cancelled at once,
    not drained for ``shutdown_timeout_s`` (they would wait up to their deadline), left
    uncommitted, not published as errors, and the worker exits 0; its restart, with the
    judge back, evaluates them."""
    topics = Topics.fresh("judgestop")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    async with llm_server(decide=decide) as server:
        judge = judge_config(server, max_retries=20, deadline_s=60)
        # A short session: the restarted worker joins sooner (Tansu holds a JoinGroup for
        # half of it, and takes a while over the stopped member).
        worker = make_worker(broker, topics, judge, shutdown_timeout_s=2,
                             session_timeout_ms=2000)
        shutdown_timeout = worker.settings.worker.shutdown_timeout_s
        async with running(worker) as task:
            ends = await produce(broker.bootstrap, topics.inputs,
                                 [event_json(i, refuse=i % 3 == 0) for i in range(EVENTS)])
            await wait_for(lambda: sample(worker, "evalstream_results_published_total",
                                          status="ok") >= 20, 20, "first results")
            await go_down(server, "refused")
            await wait_for(lambda: worker.in_flight == MAX_IN_FLIGHT, 10, "slots all waiting")
            loop = asyncio.get_running_loop()
            stopped = loop.time()
            worker.request_stop()
            code = await asyncio.wait_for(asyncio.shield(task), shutdown_timeout + 5)
            took = loop.time() - stopped
        assert code == 0
        assert took < shutdown_timeout - 0.5  # the drain did not wait for them
        assert sample(worker, "evalstream_results_published_total", status="error") == 0
        assert await committed(broker.bootstrap, topics.group, topics.inputs,
                               PARTITIONS) != ends

        await come_back(server, "refused")
        worker = make_worker(broker, topics, judge, session_timeout_ms=2000)
        async with running(worker) as task:
            async def caught_up() -> bool:
                assert not task.done(), f"the worker exited with {task.result()}"
                return await committed(broker.bootstrap, topics.group, topics.inputs,
                                       PARTITIONS) == ends
            await wait_for(caught_up, 60, "commits at the end", interval=0.5)
    published = await results(broker.bootstrap, topics.results)
    assert {r["event_id"] for r in published} == {f"e{i}" for i in range(EVENTS)}
    for r in published:
        check_answer(r)
