"""Histogram buckets cover what they measure: a quantile over them is a number read off a
bucket edge, and a value past the last finite edge reads as that edge. Judge calls take
seconds to minutes (``deadline_s`` defaults to 300 s; a cascade adds its steps), so with
60 s the last edge, a judge incident's p95 evaluation time flatlined at "60 s"."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.config import OpenAIJudgeConfig
from evalstream.metrics import Metrics


def _edges(registry: CollectorRegistry, name: str) -> list[float]:
    edges = {float(s.labels["le"]) for m in registry.collect() for s in m.samples
             if s.name == f"{name}_bucket"}
    return sorted(e for e in edges if e != float("inf"))


def _metrics() -> Metrics:
    m = Metrics(CollectorRegistry())
    m.evaluation_seconds.labels("e").observe(0.0)
    m.judge_latency.labels("j").observe(0.0)
    m.end_to_end_lag.observe(0.0)
    return m


@pytest.mark.parametrize("name", ["evalstream_evaluation_duration_seconds",
                                  "evalstream_judge_latency_seconds"])
@pytest.mark.parametrize("seconds", [90.0, 150.0, 240.0, 400.0])
def test_a_slow_judge_is_measured_not_clipped(name: str, seconds: float) -> None:
    edges = _edges(_metrics().registry, name)
    # Some finite edge within a factor 2.5 above it (the ratio of the fine buckets).
    assert any(seconds <= e <= 2.5 * seconds for e in edges), edges


def test_latency_buckets_reach_a_default_request_deadline_and_a_cascade_of_two() -> None:
    deadline = OpenAIJudgeConfig(model="m", base_url="http://judge").deadline_s
    for name in ("evalstream_evaluation_duration_seconds", "evalstream_judge_latency_seconds"):
        assert _edges(_metrics().registry, name)[-1] >= 2 * deadline


@pytest.mark.parametrize("seconds", [2 * 3600.0, 12 * 3600.0])
def test_end_to_end_lag_of_a_backlog_is_measured_not_clipped(seconds: float) -> None:
    # A consumer stuck for hours, or a replay of yesterday (kafka.start_from): the p95 lag
    # panel read "1 h" for all of it.
    edges = _edges(_metrics().registry, "evalstream_end_to_end_lag_seconds")
    assert any(seconds <= e <= 4 * seconds for e in edges), edges
