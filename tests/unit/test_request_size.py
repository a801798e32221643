"""``kafka.max_request_size`` must hold the largest error result the worker can publish.

A result the producer refuses as too large is replaced by an error result that the
pipeline keeps small (ids, attributes and message clipped); were that refused as well, the
worker would stop, and stop again at the same message after every restart. Below that
floor, ordinary results (~1 KB) are refused too. Checked at start-up (exit 2).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from evalstream.app.checks import check_request_size
from evalstream.app.pipeline import Pipeline
from evalstream.app.publish_result import with_details
from evalstream.app.result_build import widest_error_input
from evalstream.app.sessions import stand_in_details
from evalstream.app.worker import Worker
from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import Settings
from evalstream.errors import ConfigError
from evalstream.events import JudgeInfo, TraceEvent
from evalstream.metrics import Metrics
from evalstream.sinks.kafka import result_record_bytes
from tests.unit.pipeline_doubles import JUDGES, settings


def pipeline_of(config: Settings) -> Pipeline:
    return Pipeline(config, JUDGES, Metrics())


def floor_of(config: Settings) -> int:
    return max(result_record_bytes(r, widest_key=True)
               for r in pipeline_of(config).largest_error_results())


def test_a_small_max_request_size_exits_2_naming_the_field(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"max_request_size": 2048},
        "inputs": [{"topic": "traces"}],
        "routes": [{"name": "r", "evaluators": [{"evaluator": "refusal"}]}]}),
        encoding="utf-8")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "kafka.max_request_size (2048) must be at least" in err
    assert "route 'r', evaluator 'refusal'" in err


def test_the_worker_refuses_to_start_below_the_floor() -> None:
    # ``run`` builds the worker before it connects anything: the same check, exit 2.
    with pytest.raises(ConfigError, match=r"kafka\.max_request_size \(4096\)"):
        Worker(settings(kafka={"max_request_size": 4096}), registry=CollectorRegistry(),
               judges=JUDGES)


def test_the_floor_is_exact_and_grows_with_the_copied_attributes() -> None:
    plain = settings()
    floor = floor_of(plain)
    assert 30_000 < floor < 50_000  # five 1,024-character ids at 6 bytes, and the rest
    check_request_size(settings(kafka={"max_request_size": floor}), pipeline_of(plain))
    below = settings(kafka={"max_request_size": floor - 1})
    with pytest.raises(ConfigError, match=f"must be at least {floor} bytes"):
        check_request_size(below, pipeline_of(below))
    wide = settings(results={"attributes": [f"a{i}" for i in range(32)]})
    assert floor_of(wide) > floor + 32 * 256 * 6
    assert floor_of(wide) < 4_194_304  # the default max_request_size holds any of them


def test_a_route_at_rate_0_is_no_error_result_and_no_crash() -> None:
    # A rate of 0 publishes nothing; an error result at rate 0 cannot even be built.
    config = settings(routes=[{"name": "off", "sample_rate": 0,
                               "evaluators": [{"evaluator": "unit_scripted"}]}])
    assert pipeline_of(config).largest_error_results() == []
    check_request_size(config, pipeline_of(config))


def test_the_default_max_request_size_passes() -> None:
    config = settings()
    check_request_size(config, pipeline_of(config))


def _nasty(rng: random.Random, length: int) -> str:
    # No lone surrogates: the decoders' JSON and protobuf parsers refuse them.
    alphabet = ["\x00", "\x1f", '"', "\\", "a", "é", "\u2028", "\U0001f600"]
    return "".join(rng.choice(alphabet) for _ in range(length))


@pytest.mark.parametrize("seed", range(20))
def test_no_error_result_is_larger_than_the_floor(seed: int) -> None:
    # Events far over every limit, of characters JSON and UTF-8 make long: the error
    # result the pipeline builds, as the producer counts it, never passes the floor.
    rng = random.Random(seed)
    config = settings(results={"attributes": ["model", "tenant"]})
    pipeline = pipeline_of(config)
    floor = floor_of(config)
    fields: dict[str, Any] = {name: _nasty(rng, rng.randint(0, 5000)) for name in
                              ("event_id", "trace_id", "span_id", "session_id", "app")}
    event = TraceEvent(**fields, attributes={"model": _nasty(rng, 3000),
                                             "tenant": _nasty(rng, 10)})
    (largest,) = pipeline.largest_error_results()  # one per configured evaluation
    plan = pipeline.plan(TraceEvent(event_id="e", trace_id="t"), "traces")[0]
    assert plan.bound.label == largest.evaluator
    result = pipeline.failed(event, plan, _nasty(rng, rng.randint(0, 3000)))
    assert result_record_bytes(result) <= floor
    # Carrying the judge spend of the result it stands in for (a plugin judge names itself
    # and counts as it likes), and of a judge error: still within the floor.
    result = pipeline.failed(event, plan, _nasty(rng, rng.randint(0, 3000)), _nasty_judge(rng))
    assert result_record_bytes(result) <= floor


def _nasty_judge(rng: random.Random) -> JudgeInfo:
    def count() -> int:
        return rng.choice([0, 1, 2**31, -(2**63), 2**64, -(10**40), 10**40])

    def real() -> float:
        # No NaN or infinity: JudgeInfo refuses them (JSON has neither).
        return rng.choice([0.0, 1e-300, -2.9205048131065683e-196, -1.7976931348623157e308,
                           rng.uniform(-1e9, 1e9)])

    return JudgeInfo(backend=_nasty(rng, rng.randint(0, 5000)),
                     model=rng.choice([None, _nasty(rng, rng.randint(0, 5000))]),
                     latency_ms=real(), requests=count(), tokens_in=count(),
                     tokens_out=count(), cost_usd=real(), cached=rng.random() < 0.5,
                     escalated=rng.random() < 0.5, capped=rng.random() < 0.5,
                     probabilities_from=rng.choice([None, "logprobs", "json", "mixed"]))


def test_the_floor_holds_the_widest_judge_a_stand_in_can_carry() -> None:
    # Every field past its limit in the longest JSON characters, the judge's counts past 64
    # bits and its floats at their longest: at the floor (within the clock's digits), not
    # over it. Checked: over it by far before error results bounded their judge.
    config = settings(results={"attributes": ["model"]})
    pipeline = pipeline_of(config)
    floor = floor_of(config)
    wide = "\x00" * 5000
    event = TraceEvent(event_id=wide, trace_id=wide, span_id=wide, session_id=wide, app=wide,
                       attributes={"model": wide},
                       timestamp=datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC))
    judge = JudgeInfo(backend=wide, model=wide, latency_ms=-2.2250738585072014e-308,
                      requests=-(10**40), tokens_in=-(10**40), tokens_out=-(10**40),
                      cost_usd=-1.7976931348623157e308, probabilities_from="logprobs")
    plan = pipeline.plan(TraceEvent(event_id="e", trace_id="t"), "traces")[0]
    size = result_record_bytes(pipeline.failed(event, plan, wide, judge), widest_key=True)
    assert floor - 10 <= size <= floor


def test_the_floor_holds_a_session_route_s_stand_in() -> None:
    # On a session route the stand-in also says which session it stands in for
    # (details.session without the members' ids): the floor must hold that too. Checked:
    # over the floor without the fix.
    config = settings(sampling={"key": "session_id"}, routes=[{
        "name": "chat", "session": {"gap_s": 1}, "evaluators": [{"evaluator": "unit_scripted"}]}])
    pipeline = pipeline_of(config)
    floor = floor_of(config)
    event, error, judge = widest_error_input(())
    plan = pipeline.plan(TraceEvent(event_id="e", trace_id="t", session_id="s"), "traces")[0]
    session = {"closed": "max_events", "events": 10**12, "part": 10**12, "late": False,
               "event_ids": ["e"] * 1000}
    stand_in = with_details(pipeline.failed(event, plan, error, judge),
                            {"session": stand_in_details(session)})
    assert result_record_bytes(stand_in, widest_key=True) <= floor
    plain = settings(routes=[{"name": "chat", "evaluators": [{"evaluator": "unit_scripted"}]}])
    assert floor_of(plain) < floor


def test_an_error_result_keeps_its_judge_short_and_its_counts_within_64_bits() -> None:
    config = settings()
    pipeline = pipeline_of(config)
    plan = pipeline.plan(TraceEvent(event_id="e", trace_id="t"), "traces")[0]
    judge = JudgeInfo(backend="b" * 300, model="m" * 300, requests=2**70, tokens_in=-(2**70),
                      tokens_out=5, cost_usd=0.25)
    failed = pipeline.failed(TraceEvent(event_id="e"), plan, "x", judge).judge
    assert failed is not None
    assert (failed.backend, failed.model) == ("b" * 256, "m" * 256)
    assert (failed.requests, failed.tokens_in, failed.tokens_out, failed.cost_usd) == (
        2**63 - 1, -(2**63), 5, 0.25)
    usual = JudgeInfo(backend="openai", model="gpt-4o-mini", requests=1, cost_usd=0.01)
    assert pipeline.failed(TraceEvent(event_id="e"), plan, "x", usual).judge is usual
