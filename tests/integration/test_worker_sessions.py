"""Session windows on the real broker: one result per conversation once it goes quiet, its
messages committed only after that result is durable, and a worker stopped mid-window
loses nothing (the next one re-windows the redelivered events, under the same ids)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import Settings
from evalstream.events import dump_json
from tests.integration.workerkit import (
    Topics,
    committed,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all

pytestmark = pytest.mark.integration

ROLE = "A support assistant for an online shop: orders, refunds and deliveries only."
EVALUATORS = [{"evaluator": "frustration", "params": {"source": "user_turns"}},
              {"evaluator": "role_adherence", "params": {"chatbot_role": ROLE}}]
SESSIONS = {"s-a": 3, "s-b": 2, "s-c": 4}


def settings(broker: Broker, topics: Topics, gap_s: float, **extra: Any) -> Settings:
    return settings_for(
        broker.bootstrap, topics, sampling={"key": "session_id"},
        routes=[{"name": "chat", "session": {"gap_s": gap_s}, "evaluators": EVALUATORS}],
        **extra)


def turn(session: str | None, i: int) -> bytes:
    """One call of a conversation, as an SDK logs it: the input and the output only."""
    body: dict[str, Any] = {"event_id": f"{session or 'plain'}-{i}", "trace_id": f"t-{i}",
                            "input": f"Where is my order number {i}? Still nothing.",
                            "output": f"Order {i} ships tomorrow; sorry for the wait."}
    if session is not None:
        body["session_id"] = session
    return dump_json(body)


async def produce_sessions(broker: Broker, topics: Topics) -> int:
    """The sessions' turns interleaved, then two events without a session; the message
    count. One partition, so commit positions say exactly what was held."""
    values = [turn(s, i) for i in range(max(SESSIONS.values()))
              for s, n in SESSIONS.items() if i < n]
    values += [turn(None, 100), turn(None, 101)]
    ends = await produce(broker.bootstrap, topics.inputs, values)
    assert ends == {0: len(values)}
    return len(values)


def by_session(published: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in published:
        if r["session_id"] is not None:
            out.setdefault(r["session_id"], []).append(r)
    return out


def open_sessions(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("evalstream_sessions_open", {"route": "chat"})


async def test_one_result_per_session_after_the_gap_and_commits_wait_for_it(
        broker: Broker) -> None:
    topics = Topics.fresh("sessions")
    await topics.create(broker.bootstrap, partitions=1)
    total = await produce_sessions(broker, topics)
    registry = CollectorRegistry()
    worker = Worker(settings(broker, topics, gap_s=1.5), registry=registry)
    async with running(worker):
        # Events without a session are evaluated at once, as on any route...
        await wait_for(lambda: registry.get_sample_value(
            "evalstream_results_published_total", {"status": "ok"}) == 4, timeout=20,
            what="the plain events' results")
        # ...while the sessions are held, and so is the partition's commit position.
        assert open_sessions(registry) == len(SESSIONS)
        assert (await committed(broker.bootstrap, topics.group, topics.inputs, 1))[0] == 0

        async def committed_past_start() -> bool:
            return (await committed(broker.bootstrap, topics.group, topics.inputs, 1))[0] > 0

        await wait_for(committed_past_start, timeout=20, what="a commit past the sessions")
        # Once the position moved, every session's results were already durable.
        records = await read_all(broker.bootstrap, topics.results,
                                 expect=4 + 2 * len(SESSIONS), timeout=5)
        assert len(records) == 4 + 2 * len(SESSIONS)

        async def all_committed() -> bool:
            return (await committed(broker.bootstrap, topics.group, topics.inputs, 1))[0] \
                == total

        await wait_for(all_committed, timeout=20, what="every offset committed")
        assert open_sessions(registry) == 0
    closed = registry.get_sample_value("evalstream_sessions_closed_total",
                                       {"route": "chat", "reason": "gap"})
    assert closed == len(SESSIONS)

    published = await results(broker.bootstrap, topics.results, expect=4 + 2 * len(SESSIONS))
    sessions = by_session(published)
    assert set(sessions) == set(SESSIONS)
    for session, n in SESSIONS.items():
        got = sessions[session]
        assert sorted(r["evaluator"] for r in got) == ["frustration", "role_adherence"]
        for r in got:
            assert r["status"] == "ok", r
            assert r["details"]["session"] == {
                "closed": "gap", "events": n, "part": 1, "late": False,
                "event_ids": [f"{session}-{i}" for i in range(n)]}
            assert r["event_id"].startswith("session-")
        role = next(r for r in got if r["evaluator"] == "role_adherence")
        assert role["details"]["assistant_turns"] == n  # one conversation, every turn
    plain = [r for r in published if r["session_id"] is None]
    assert sorted({r["event_id"] for r in plain}) == ["plain-100", "plain-101"]


async def test_a_worker_stopped_mid_window_loses_nothing(broker: Broker) -> None:
    topics = Topics.fresh("sessions-stop")
    await topics.create(broker.bootstrap, partitions=1)
    total = await produce_sessions(broker, topics)

    registry = CollectorRegistry()
    worker = Worker(settings(broker, topics, gap_s=60), registry=registry)
    async with running(worker) as task:
        await wait_for(lambda: open_sessions(registry) == len(SESSIONS), timeout=20,
                       what="every session held")
        await wait_for(lambda: registry.get_sample_value(
            "evalstream_results_published_total", {"status": "ok"}) == 4, timeout=20,
            what="the plain events' results")
        started = time.monotonic()
        worker.request_stop()
        assert await asyncio.wait_for(asyncio.shield(task), timeout=15) == 0
    # The drain did not wait out the 60 s gap, and nothing of the sessions was committed.
    assert time.monotonic() - started < 5  # the drain deadline is 10 s
    assert registry.get_sample_value("evalstream_sessions_closed_total",
                                     {"route": "chat", "reason": "abandoned"}) == len(SESSIONS)
    assert (await committed(broker.bootstrap, topics.group, topics.inputs, 1))[0] == 0

    # The next worker of the group gets the sessions again and evaluates them whole.
    worker = Worker(settings(broker, topics, gap_s=0.5), registry=CollectorRegistry())
    async with running(worker):
        async def all_committed() -> bool:
            return (await committed(broker.bootstrap, topics.group, topics.inputs, 1))[0] \
                == total

        await wait_for(all_committed, timeout=30, what="every offset committed")
    published = await results(broker.bootstrap, topics.results)
    # The plain events were evaluated by both workers (held behind the sessions, they were
    # not committed either): the same results twice, under the same ids.
    plain = [r["result_id"] for r in published if r["session_id"] is None]
    assert len(plain) == 8
    assert len(set(plain)) == 4
    sessions = by_session(published)
    assert {s: len(rs) for s, rs in sessions.items()} == dict.fromkeys(SESSIONS, 2)
    for session, n in SESSIONS.items():
        assert all(r["details"]["session"]["events"] == n for r in sessions[session])

    # A redelivery that rebuilds the same windows publishes the same result ids.
    again = Topics(topics.inputs, topics.results, topics.dead_letter, topics.alerts,
                   topics.group + "-again")
    worker = Worker(settings(broker, again, gap_s=0.5), registry=CollectorRegistry())
    async with running(worker):
        async def replayed() -> bool:
            return (await committed(broker.bootstrap, again.group, again.inputs, 1))[0] \
                == total

        await wait_for(replayed, timeout=30, what="the replay committed")
    replay = (await results(broker.bootstrap, topics.results))[len(published):]
    assert len(replay) == 4 + 2 * len(SESSIONS)
    assert {r["result_id"] for r in replay} == {r["result_id"] for r in published}


async def test_a_rebalance_abandons_open_sessions_and_the_new_owner_redoes_them(
        broker: Broker) -> None:
    topics = Topics.fresh("sessions-group")
    await topics.create(broker.bootstrap, partitions=2)
    sessions = {f"g-{i}": 2 + i % 3 for i in range(6)}
    values = [turn(s, i) for s, n in sessions.items() for i in range(n)]
    keys = [s.encode() for s, n in sessions.items() for _ in range(n)]  # one partition each
    ends = await produce(broker.bootstrap, topics.inputs, values, keys=keys)
    kafka = {"session_timeout_ms": 3000}

    registry = CollectorRegistry()
    a = Worker(settings(broker, topics, gap_s=60, kafka=kafka), registry=registry)
    b = Worker(settings(broker, topics, gap_s=0.5, kafka=kafka), registry=CollectorRegistry())
    async with running(a) as a_task:
        await wait_for(lambda: open_sessions(registry) == len(sessions), timeout=20,
                       what="a holding every session")
        async with running(b, timeout=30):
            # b joining revokes a's partitions: a's open sessions are abandoned at once.
            await wait_for(lambda: (registry.get_sample_value(
                "evalstream_sessions_closed_total",
                {"route": "chat", "reason": "abandoned"}) or 0) >= len(sessions),
                timeout=30, what="a abandoning its sessions on the revoke")
            a.request_stop()
            assert await asyncio.wait_for(asyncio.shield(a_task), timeout=20) == 0

            async def all_committed() -> bool:
                got = await committed(broker.bootstrap, topics.group, topics.inputs, 2)
                return all(got[p] >= end for p, end in ends.items())

            await wait_for(all_committed, timeout=40, what="b committing every partition")
    # a (gap 60 s) evaluated none; b evaluated every session whole, each evaluator once
    # per session id, repeats (if any) under the same result id.
    assert not registry.get_sample_value("evalstream_sessions_closed_total",
                                         {"route": "chat", "reason": "gap"})
    published = by_session(await results(broker.bootstrap, topics.results))
    assert set(published) == set(sessions)
    for session, n in sessions.items():
        got = published[session]
        assert {r["details"]["session"]["events"] for r in got} == {n}
        ids = {(r["evaluator"], r["result_id"]) for r in got}
        assert sorted(e for e, _ in ids) == ["frustration", "role_adherence"]
