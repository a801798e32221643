"""fast_inc / fast_observe update exactly what Counter.inc / Histogram.observe update."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, Counter, Histogram

from evalstream.metrics import fast_inc, fast_observe

_BUCKETS = (0.05, 0.1, 0.5, 1.0)
_VALUES = (0.0, 0.05, 0.07, 0.1, 0.5000001, 1.0, 3.0, math.inf, -2.0, math.nan, 0.5)


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append((s.name, s.labels, "nan" if math.isnan(s.value) else s.value))
    return sorted(out, key=repr)


def test_fast_observe_gives_the_same_samples_as_observe() -> None:
    slow_reg, fast_reg = CollectorRegistry(), CollectorRegistry()
    slow = Histogram("h", "h", ["a"], buckets=_BUCKETS, registry=slow_reg).labels("x")
    fast = fast_observe(Histogram("h", "h", ["a"], buckets=_BUCKETS,
                                  registry=fast_reg).labels("x"))
    plain_slow = Histogram("p", "p", buckets=_BUCKETS, registry=slow_reg)
    plain_fast = fast_observe(Histogram("p", "p", buckets=_BUCKETS, registry=fast_reg))
    for value in _VALUES:
        slow.observe(value)
        fast(value)
        plain_slow.observe(value)
        plain_fast(value)
    assert _samples(fast_reg) == _samples(slow_reg)
    assert fast_reg.get_sample_value("h_bucket", {"a": "x", "le": "0.1"}) == 5  # -2 .. 0.1


def test_fast_inc_gives_the_same_samples_as_inc() -> None:
    slow_reg, fast_reg = CollectorRegistry(), CollectorRegistry()
    slow = Counter("c", "c", ["a"], registry=slow_reg).labels("x")
    fast = fast_inc(Counter("c", "c", ["a"], registry=fast_reg).labels("x"))
    for amount in (1, 1, 2.5, 1 / 0.3):
        slow.inc(amount)
        fast(amount)
    assert _samples(fast_reg) == _samples(slow_reg)
    assert fast_reg.get_sample_value("c_total", {"a": "x"}) == 4.5 + 1 / 0.3


def test_something_that_is_not_a_histogram_child_falls_back_to_its_own_methods() -> None:
    calls: list[float] = []

    class Odd:
        def observe(self, amount: float) -> None:
            calls.append(amount)

        def inc(self, amount: float) -> None:
            calls.append(-amount)

    fast_observe(Odd())(0.5)
    fast_inc(Odd())(2)
    assert calls == [0.5, -2]
