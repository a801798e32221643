"""Canaries on the real broker at 1% sampling: every canary gets its results, published with
``canary: true`` and its gold answer; the calibration counters give exactly what the
offline report computes from those results; and traffic counters, pass-rate windows and
drift never see a canary."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.calibration import BIN_LABELS
from evalstream.app.offline_report import EvaluatorSummary, expected_calibration_error
from evalstream.app.worker import Worker
from evalstream.events import EvalResult, dump_json
from tests.integration.workerkit import (
    Topics,
    committed,
    event_json,
    expected_sampled,
    results,
    running,
    settings_for,
    wait_for,
)
from tests.support.broker import Broker
from tests.support.kafka import produce

pytestmark = pytest.mark.integration

PARTITIONS = 2
RATE = 0.01
N = 1500
CANARY_EVERY = 25  # 60 canaries


def canary_json(i: int) -> bytes:
    refuse = i % 3 == 0
    output = ("I'm sorry, but I can't help with that request." if refuse
              else f"Sure. Step {i}: open the settings page and choose 'Reset password'.")
    # Gold says "not refused" for every 3rd one it refuses and for 1 in 5 others: some
    # disagreements, so agreement is neither 0 nor 1.
    gold = "false" if (refuse and i % 2 == 0) else "true"
    return dump_json({"event_id": f"c{i}", "trace_id": f"canary-{i}",
                      "input": f"How do I reset my password? ({i})", "output": output,
                      "app": "support-bot",
                      "attributes": {"evalstream.canary": "true",
                                     "evalstream.gold.refusal": gold}})


@pytest.mark.parametrize("key", ["trace_id", "message_key"])
async def test_canaries_are_all_evaluated_and_kept_out_of_traffic(broker: Broker,
                                                                   key: str) -> None:
    topics = Topics.fresh(f"canary-{key.replace('_', '')}")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(broker.bootstrap, topics, sampling={"rate": RATE, "key": key},
                            drift={"enabled": True, "tick_s": 0.1, "bucket_s": 1,
                                   "min_samples": 1})
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    headers: list[list[tuple[str, bytes]] | None] = []
    canaries = set()
    for i in range(N):
        if i % CANARY_EVERY == 0:
            values.append(canary_json(i))
            keys.append(f"canary-{i}".encode())
            # Under message_key the key decides unread: the header says "read me".
            headers.append([("evalstream.canary", b"true")] if key == "message_key" else None)
            canaries.add(f"c{i}")
        else:
            values.append(event_json(i, refuse=i % 10 == 0))
            keys.append(f"trace-{i}".encode())
            headers.append(None)
    traffic = expected_sampled(settings, (f"e{i}" for i in range(N)
                                          if i % CANARY_EVERY != 0))
    ends = await produce(broker.bootstrap, topics.inputs, values, keys=keys, headers=headers)
    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)

    async def reached() -> bool:
        got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
        return all(got.get(p, 0) >= end for p, end in ends.items())

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    labels = {"route": "default", "evaluator": "refusal"}
    async with running(worker):
        await wait_for(reached, timeout=60, what="committed offsets to reach the end")
        # The monitor's gauges follow within a tick.
        await wait_for(lambda: sample("evalstream_pass_rate_samples", **labels,
                                      window="5m") == len(traffic),
                       timeout=5, what="the pass-rate window to count the traffic")

    published = await results(broker.bootstrap, topics.results,
                              expect=len(canaries) + len(traffic))
    by_kind = {True: [r for r in published if r["canary"]],
               False: [r for r in published if not r["canary"]]}
    assert {r["event_id"] for r in by_kind[True]} == canaries
    assert {r["event_id"] for r in by_kind[False]} == traffic
    assert all(r["sample_rate"] == 1.0 and r["gold"] in ("true", "false")
               for r in by_kind[True])
    assert all(r["sample_rate"] == RATE and r["gold"] is None for r in by_kind[False])

    # Calibration counters = the offline report's figures on the same results.
    summary = EvaluatorSummary("default", "refusal")
    for body in by_kind[True]:
        body = {k: v for k, v in body.items() if not k.startswith("_")}
        summary.add(EvalResult.model_validate(body), body["gold"] == "true")
    judged = {**labels, "judge": "builtin"}
    n = sum(sample("evalstream_canary_calibration_results_total", **judged, bin=b)
            for b in BIN_LABELS)
    assert n == len(summary.gold) == len(canaries)
    agreed = sample("evalstream_canary_evaluations_total", **judged, outcome="agreed")
    assert agreed == sum(summary.correct)
    assert 0 < agreed < n
    assert sample("evalstream_canary_brier_total", **judged) / n == pytest.approx(
        sum(summary.brier) / n, abs=1e-9)
    ece = sum(abs(sample("evalstream_canary_calibration_correct_total", **judged, bin=b)
                  - sample("evalstream_canary_calibration_confidence_total", **judged, bin=b))
              for b in BIN_LABELS) / n
    assert ece == pytest.approx(
        expected_calibration_error(summary.confidence, summary.correct), abs=1e-9)

    # Traffic counters, weighted counters and the pass-rate window: traffic only.
    outcomes = ("passed", "failed")
    assert sum(sample("evalstream_evaluations_total", **labels, outcome=o)
               for o in outcomes) == len(traffic)
    assert sum(sample("evalstream_evaluations_weighted_total", **labels, outcome=o)
               for o in outcomes) == pytest.approx(len(traffic) / RATE)
    assert sample("evalstream_events_sampled_total", route="default") == len(traffic)
    assert sample("evalstream_score_count", **labels) == len(traffic)
    skipped = sample("evalstream_events_skipped_total", reason="sampling")
    assert skipped + len(traffic) + len(canaries) == N
