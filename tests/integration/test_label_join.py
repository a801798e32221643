"""``join-labels`` on the real broker: a worker publishes results, human labels arrive on
the labels topic before and after their results (plus a duplicate and a bad one), and the
joiner's calibration counters equal ``compare()``'s figures on the published results."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.calibration import BIN_LABELS, compare, confidence_bin
from evalstream.app.labels_job import LabelJoiner
from evalstream.app.worker import Worker
from evalstream.events import EvalResult, dump_json
from tests.integration.workerkit import (
    Topics,
    committed,
    event_json,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, read_all, unique

pytestmark = pytest.mark.integration

N = 40  # events 0..19: labelled after their result; 20..39: before it


def gold(i: int) -> str:
    # Mostly the judge's own answer's truth, with every 4th flipped: some disagreements.
    truth = i % 5 != 0  # event_json(refuse=...) below: every 5th is refused (fails)
    return str(truth if i % 4 else not truth).lower()


@contextlib.asynccontextmanager
async def joining(joiner: LabelJoiner) -> AsyncIterator[asyncio.Task[int]]:
    ready = asyncio.Event()
    task = asyncio.create_task(joiner.run(ready))
    try:
        await asyncio.wait_for(ready.wait(), 20)
        yield task
    finally:
        joiner.request_stop()
        assert await asyncio.wait_for(task, 30) == 0


async def test_labels_join_results_in_either_order(broker: Broker) -> None:
    topics = Topics.fresh("labels")
    await topics.create(broker.bootstrap, partitions=2)
    labels_topic = unique("labels-lab")
    # As many partitions as the results topic (1 here): co-partitioned.
    await create_topics(broker.bootstrap, [labels_topic], partitions=1)
    settings = settings_for(broker.bootstrap, topics, labels={"topic": labels_topic})
    worker_registry, registry = CollectorRegistry(), CollectorRegistry()
    worker = Worker(settings, registry=worker_registry)
    joiner = LabelJoiner(settings, registry=registry)
    result_id = worker.pipeline._routes[0].evaluators[0].result_id

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    judged = {"route": "default", "evaluator": "refusal", "judge": "builtin"}

    def joined() -> float:
        return sum(sample("evalstream_labels_evaluations_total", **judged, outcome=o)
                   for o in ("agreed", "disagreed"))

    def label(i: int, rid: str) -> bytes:
        return dump_json({"result_id": rid, "gold": gold(i), "labeller": "qa-team"})

    async with running(worker), joining(joiner):
        # First half: results first, labels after them.
        await produce(broker.bootstrap, topics.inputs,
                      [event_json(i, refuse=i % 5 == 0) for i in range(20)],
                      keys=[f"trace-{i}".encode() for i in range(20)])
        first = await results(broker.bootstrap, topics.results, expect=20)
        ids = {r["event_id"]: r["result_id"] for r in first}
        await produce(broker.bootstrap, labels_topic,
                      [label(i, ids[f"e{i}"]) for i in range(20)]
                      + [label(3, ids["e3"]), b"{not json", dump_json({"gold": "true"})],
                      keys=[f"trace-{i}".encode() for i in range(20)] + [b"trace-3", None,
                                                                          None])
        await wait_for(lambda: joined() == 20, timeout=20, what="the first 20 labels joined")
        # Second half: labels first (result ids are deterministic), then the events.
        await produce(broker.bootstrap, labels_topic,
                      [label(i, result_id(f"e{i}")) for i in range(20, N)],
                      keys=[f"trace-{i}".encode() for i in range(20, N)])
        await wait_for(lambda: sample("evalstream_labels_pending", kind="label") == N - 20,
                       timeout=20, what="the early labels to wait for their results")
        await produce(broker.bootstrap, topics.inputs,
                      [event_json(i, refuse=i % 5 == 0) for i in range(20, N)],
                      keys=[f"trace-{i}".encode() for i in range(20, N)])
        await wait_for(lambda: joined() == N, timeout=30, what="every label joined")
        assert sample("evalstream_labels_pending", kind="label") == 0
        # Every label matched, every result too: the joiner's group commits to the ends.
        label_end = {0: N + 3}

        async def drained() -> bool:
            got = await committed(broker.bootstrap, joiner.group_id, labels_topic, 1)
            return got == label_end
        await wait_for(drained, timeout=20, what="the labels topic committed to its end")

    published = await results(broker.bootstrap, topics.results, expect=N)
    assert len(published) == N
    comparisons = []
    for body in published:
        result = EvalResult.model_validate({k: v for k, v in body.items()
                                            if not k.startswith("_")})
        i = int(result.event_id.removeprefix("e"))
        comparison = compare(result, gold(i) == "true")
        assert comparison is not None
        comparisons.append(comparison)
    agreed = sum(c.correct for c in comparisons)
    assert 0 < agreed < N
    assert sample("evalstream_labels_evaluations_total", **judged, outcome="agreed") == agreed
    assert sample("evalstream_labels_brier_total", **judged) == pytest.approx(
        sum(c.brier for c in comparisons), abs=1e-9)
    for b in BIN_LABELS:
        in_bin = [c for c in comparisons if BIN_LABELS[confidence_bin(c.confidence)] == b]
        assert sample("evalstream_labels_calibration_results_total", **judged, bin=b) == \
            len(in_bin)
        assert sample("evalstream_labels_calibration_correct_total", **judged, bin=b) == \
            sum(c.correct for c in in_bin)
        assert sample("evalstream_labels_calibration_confidence_total", **judged, bin=b) == \
            pytest.approx(sum(c.confidence for c in in_bin), abs=1e-9)
    # The duplicate counted once; the two bad labels counted and dead-lettered.
    assert sample("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 1
    assert sample("evalstream_labels_ignored_total", kind="label", reason="undecodable") == 2
    dead = await read_all(broker.bootstrap, topics.dead_letter, expect=2, timeout=10, idle=0.5)
    assert sorted(r.value for r in dead) == sorted([b"{not json",  # type: ignore[attr-defined]
                                                    dump_json({"gold": "true"})])
    # The worker's own counters never see labels.
    assert worker_registry.get_sample_value(
        "evalstream_labels_evaluations_total", {**judged, "outcome": "agreed"}) is None
