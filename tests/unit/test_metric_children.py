"""The hot path's counter and histogram updates expose what the public methods expose."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from evalstream.app.metric_children import counter_inc, histogram_observe
from evalstream.app.pipeline import Pipeline
from evalstream.metrics import Metrics
from tests.unit.pipeline_doubles import JUDGES, settings

BUCKETS = (0.05, 0.1, 0.5, 1.0, 60.0)
VALUES = [0.0, 0.05, 0.0500001, 0.1, 0.3, 1.0, 59.9, 60.0, 61.0, 1e9, math.inf, -3.0,
          math.nan, 0.9002495108803149]


def exposition(registry: CollectorRegistry) -> list[str]:
    # ``_created`` is the time each child was made: the two registries differ there only.
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


def metrics(registry: CollectorRegistry) -> tuple[Counter, Histogram, Histogram]:
    return (Counter("c_total", "c", ["route"], registry=registry),
            Histogram("h", "h", ["route"], buckets=BUCKETS, registry=registry),
            Histogram("plain", "h", buckets=BUCKETS, registry=registry))


def test_updates_expose_the_same_samples_as_inc_and_observe() -> None:
    public, fast = CollectorRegistry(), CollectorRegistry()
    counter, histogram, plain = metrics(public)
    fast_counter, fast_histogram, fast_plain = metrics(fast)
    inc = counter_inc(fast_counter.labels("a"))
    observe = histogram_observe(fast_histogram.labels("a"))
    observe_plain = histogram_observe(fast_plain)
    for value in VALUES:
        if value >= 0:  # counters refuse negative amounts; the hot path never has one
            counter.labels("a").inc(value)
            inc(value)
        histogram.labels("a").observe(value)
        observe(value)
        plain.observe(value)
        observe_plain(value)
    assert exposition(fast) == exposition(public)
    # And the values are the expected ones, not merely equal: NaN lands in no bucket.
    assert fast.get_sample_value("h_bucket", {"route": "a", "le": "0.05"}) == 3  # -3, 0, .05
    assert fast.get_sample_value("h_count", {"route": "a"}) == len(VALUES) - 1


def test_the_public_method_is_kept_when_the_internals_are_not_the_expected_ones() -> None:
    class Odd(Histogram):
        def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
            super().observe(amount * 2, exemplar)

    odd = Odd("odd", "h", registry=CollectorRegistry())
    assert histogram_observe(odd) == odd.observe
    bare = Counter("bare_total", "c", registry=CollectorRegistry())
    del bare._value  # an upgrade that renamed it
    assert counter_inc(bare) == bare.inc
    parent = Counter("parent_total", "c", ["x"], registry=CollectorRegistry())
    assert counter_inc(parent) == parent.inc  # unlabelled parent: inc keeps raising
    with pytest.raises(ValueError, match="missing label values"):
        counter_inc(parent)(1)


def test_the_pipelines_children_are_the_fast_ones() -> None:
    pipeline = Pipeline(settings(), JUDGES, Metrics(CollectorRegistry()))
    bound = pipeline._routes[0].evaluators[0]
    assert bound.outcomes["passed"].__qualname__ == "MutexValue.inc"
    assert bound.seconds.__qualname__ == "histogram_observe.<locals>.observe"
