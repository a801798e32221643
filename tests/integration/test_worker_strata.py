"""Per-stratum sampling rates on the real broker: one route, two tenants at their own
rates (a third, unlisted, at the route's rate of 0), each result carrying the rate its
event was sampled at, and the weighted counter counting each at 1/rate."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.events import TraceEvent, dump_json
from evalstream.sampling import Sampler
from tests.integration.workerkit import Topics, results, running, settings_for
from tests.support.broker import Broker
from tests.support.kafka import produce

pytestmark = pytest.mark.integration

RATES = {"acme": 0.25, "tiny-co": 1.0}
TENANTS = ("acme", "tiny-co", "other")
N = 600


async def test_two_strata_of_one_route_get_results_at_their_own_rates(broker: Broker) -> None:
    topics = Topics.fresh("strata")
    await topics.create(broker.bootstrap, partitions=2)
    settings = settings_for(
        broker.bootstrap, topics, sampling={"rate": 0.8}, results={"attributes": ["tenant"]},
        routes=[{"name": "support", "sample_rate": 0.0,
                 "strata": {"by": "tenant", "rates": RATES},
                 "evaluators": [{"evaluator": "refusal"}]}])
    sampler = Sampler(settings.sampling)
    values, expected = [], {}
    for i in range(N):
        tenant = TENANTS[i % 3]
        values.append(dump_json({"event_id": f"e{i}", "trace_id": f"trace-{i}",
                                 "input": "How do I reset my password?",
                                 "output": "Open the settings page and choose Reset.",
                                 "attributes": {"tenant": tenant}}))
        rate = 0.8 * RATES.get(tenant, 0.0)
        if sampler.fraction(TraceEvent(event_id=f"e{i}", trace_id=f"trace-{i}")) < rate:
            expected[f"e{i}"] = (tenant, rate)
    await produce(broker.bootstrap, topics.inputs, values)
    assert 20 < sum(t == "acme" for t, _ in expected.values()) < 80

    registry = CollectorRegistry()
    async with running(Worker(settings, registry=registry)):
        published = await results(broker.bootstrap, topics.results, expect=len(expected))

    got = {str(r["event_id"]): (r["attributes"]["tenant"], r["sample_rate"]) for r in published}
    assert got == expected  # each tenant at global x its stratum's rate; "other" at 0
    weighted = sum(registry.get_sample_value(
        "evalstream_evaluations_weighted_total",
        {"route": "support", "evaluator": "refusal", "outcome": o}) or 0.0
        for o in ("passed", "failed", "labelled", "error"))
    assert weighted == pytest.approx(sum(1 / rate for _, rate in expected.values()))
