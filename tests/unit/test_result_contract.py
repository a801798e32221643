"""The results contract as a downstream consumer reads it: every kind of result the worker
publishes (each outcome of an evaluation, canaries, sessions, stand-ins for refused results,
copied attributes, reasons on and off) validates against the committed schema, carries every
field, writes its times as RFC 3339 UTC and its numbers finite, and its OTel copy names the
same result and span."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import load_settings
from evalstream.errors import OutputRejectedError
from evalstream.events import SCHEMA_VERSION, EvalResult, RawRecord, dump_json, read_result
from evalstream.sinks.headers import result_headers
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.integration.workerkit import wait_for
from tests.unit import pipeline_doubles  # noqa: F401  (registers unit_scripted, unit_labels)
from tests.unit.test_session_path import serving

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas"
                     / "eval_result.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
#: RFC 3339 in UTC as results write it (jsonschema checks "format" only with an optional
#: package this project does not install, so the format is checked here).
UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z")
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"

ROUTES: list[dict[str, Any]] = [
    {"name": "plain", "match": {"requires": ["output"]}, "evaluators": [
        {"evaluator": "unit_scripted", "reasons": "always"},
        {"evaluator": "unit_scripted", "name": "versioned", "version": "2"},
        {"evaluator": "unit_labels"},
        {"evaluator": "refusal", "reasons": "always"},
        {"evaluator": "sentiment", "reasons": "failures"},
    ]},
    {"name": "chat", "match": {"requires": ["session_id"]}, "session": {"gap_s": 0.2},
     "evaluators": [{"evaluator": "refusal"}, {"evaluator": "frustration"}]},
]
OUTPUTS = ["ok", "fail", "judge_error", "judge_error_info", "boom", "bad_score",
           "bad_score_costly", "opaque", "refuse_me", "I'm sorry, but I can't help with that."]


def records() -> list[RawRecord]:
    bodies: list[dict[str, Any]] = [
        {"event_id": f"e{i}", "trace_id": TRACE, "span_id": SPAN, "output": output,
         "input": "Where is my order?", "attributes": {"model": "gpt-4o", "tenant": "t"},
         "timestamp": "2026-11-29T21:05:00"}
        for i, output in enumerate(OUTPUTS)]
    bodies.append({"event_id": "c", "output": "I'm sorry, but I can't help with that.",
                   "attributes": {"evalstream.canary": "true",
                                  "evalstream.gold.refusal": "false"}})
    bodies += [{"event_id": f"s{i}", "session_id": "conv-1", "input": f"question {i}",
                "output": "This is useless!!", "timestamp": 1764450300 + i}
               for i in range(2)]
    return [RawRecord("traces", 0, i, dump_json(b)) for i, b in enumerate(bodies)]


async def publish_all() -> tuple[list[EvalResult], list[bytes]]:
    source = MemorySource(records())
    sink = MemorySink(otel_encoding="otlp_json")
    publish = sink.publish_result

    async def refuse_some(result: EvalResult) -> bool:  # over the broker's size limit
        if result.status == "ok" and result.event_id == "e8":
            raise OutputRejectedError("results refused a record of 2000000 bytes")
        return await publish(result)

    sink.publish_result = refuse_some  # type: ignore[method-assign]
    settings = load_settings(
        None, inputs=[{"topic": "traces"}], routes=ROUTES, results={"attributes": ["model"]},
        server={"host": "127.0.0.1", "port": 0}, drift={"enabled": False},
        worker={"commit_interval_s": 0.05, "shutdown_timeout_s": 20, "routing": "all"})
    w = Worker(settings, registry=CollectorRegistry(), source=source, sink=sink)
    count = len(records())
    async with serving(w):
        await wait_for(lambda: source.committed.get(("traces", 0)) == count, timeout=20,
                       what="every record committed")
    return sink.results, sink.otel_results


@pytest.fixture(scope="module")
def published() -> tuple[list[EvalResult], list[bytes]]:
    import asyncio

    return asyncio.run(publish_all())


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return []


def test_every_kind_of_result_is_published(
        published: tuple[list[EvalResult], list[bytes]]) -> None:
    results, _ = published
    errors = {r.error.split(":")[0] for r in results if r.error}
    assert errors == {"judge", "RuntimeError", "invalid score fields", "result rejected",
                      "internal error"}, errors
    assert any(r.canary and r.gold == "false" for r in results)
    assert any("session" in r.details for r in results)
    assert any(r.reason for r in results)
    assert any(r.reason is None for r in results)
    assert any(r.label for r in results if r.evaluator == "unit_labels")
    assert any(r.probabilities for r in results)
    assert any(r.judge is not None and r.status == "error" for r in results)
    assert any(r.evaluator_version == "1+2" for r in results)


def test_every_result_validates_and_carries_every_field(
        published: tuple[list[EvalResult], list[bytes]]) -> None:
    results, _ = published
    for result in results:
        body = json.loads(dump_json(result))
        assert not [e.message for e in VALIDATOR.iter_errors(body)], (result.evaluator, body)
        # Every field is written, null or not: a reader never meets a missing key.
        assert set(body) == set(SCHEMA["properties"])
        if body["judge"] is not None:
            assert set(body["judge"]) == set(SCHEMA["$defs"]["JudgeInfo"]["properties"])
        assert body["schema_version"] == SCHEMA_VERSION
        assert UTC_TIME.fullmatch(body["evaluated_at"])
        assert body["event_time"] is None or UTC_TIME.fullmatch(body["event_time"])
        assert all(math.isfinite(n) for n in _numbers(body))
        assert (body["status"] == "error") == (body["error"] is not None)
        if body["status"] == "error":
            assert (body["score"], body["label"], body["probabilities"]) == (None, None, {})
        elif body["probabilities"]:
            assert math.isclose(sum(body["probabilities"].values()), 1.0)
        # The key (trace_id) is never empty; the headers name the version.
        assert body["trace_id"]
        assert ("schema_version", SCHEMA_VERSION.encode()) in result_headers(
            body["route"], body["evaluator"])
        assert body["attributes"] == ({"model": "gpt-4o"} if body["event_id"].startswith("e")
                                      else {})
        assert read_result(dump_json(result)) == result


def test_the_otel_copy_names_the_result_and_its_span(
        published: tuple[list[EvalResult], list[bytes]]) -> None:
    results, copies = published
    by_id = {r.result_id: r for r in results}
    assert len(copies) == len(results)
    for copy in copies:
        (record,) = json.loads(copy)["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
        attributes = {a["key"]: next(iter(a["value"].values())) for a in record["attributes"]}
        result = by_id[attributes["evalstream.result_id"]]
        assert record["eventName"] == "gen_ai.evaluation.result"
        assert attributes["gen_ai.evaluation.name"] == result.evaluator
        if result.trace_id == TRACE:
            assert record["traceId"] == TRACE
            assert record.get("spanId") == (SPAN if result.span_id else None)
        if result.score is not None:
            assert attributes["gen_ai.evaluation.score.value"] == result.score
        assert ("error.type" in attributes) == (result.status == "error")


# --- result_id: the same for the same input and config, wherever and whenever it runs ---

CORPUS = [{"event_id": f"seed-{i}", "trace_id": f"t{i}", "output": text}
          for i, text in enumerate(["ok", "fail", "I can't help with that.", "Thanks!", "ok"])]


def corpus_ids(partition: int = 0, first_offset: int = 0, record_ms: int | None = None,
               route_rate: float = 1.0, reversed_params: bool = False) -> list[str]:
    """The result ids of ``CORPUS`` (every event scored: canaries) read from
    ``partition`` at ``first_offset``, with ``record_ms`` as the Kafka timestamp."""
    import asyncio

    from evalstream.app.pipeline import Pipeline
    from evalstream.config import InputTopic
    from evalstream.formats import decoder_for
    from evalstream.judges.builtin import BuiltinJudge
    from evalstream.metrics import Metrics

    params = {"topics": {"orders": "order status", "billing": "billing"},
              "fail_topics": ["other"]}
    if reversed_params:
        params = dict(reversed(params.items()))
        params["topics"] = dict(reversed(params["topics"].items()))
    settings = load_settings(None, inputs=[{"topic": "traces"}], routes=[
        {"name": "main", "sample_rate": route_rate,
         "evaluators": [{"evaluator": "refusal"}, {"evaluator": "topic", "params": params}]}])
    decode = decoder_for(InputTopic(topic="traces"))

    async def run() -> list[str]:
        pipeline = Pipeline(settings, {"builtin": BuiltinJudge()}, Metrics(CollectorRegistry()))
        ids = []
        for i, body in enumerate(CORPUS):
            # Canaries, so that every event is scored whatever the rate.
            body = {**body, "attributes": {"evalstream.canary": "true"}}
            record = RawRecord("traces", partition, first_offset + i, dump_json(body),
                               timestamp=record_ms)
            for event in decode(record).events:
                ids += sorted(r.result_id for r in await pipeline.evaluate(event,
                                                                           topic="traces"))
        return ids

    return asyncio.run(run())


def test_result_ids_do_not_depend_on_where_when_or_how_often() -> None:
    base = corpus_ids()
    assert len(base) == 2 * len(CORPUS)
    assert len(set(base)) == len(base)  # seed-0 and seed-4 differ in their ids alone
    assert corpus_ids(partition=3, first_offset=10_000, record_ms=1_764_450_300_000) == base
    assert corpus_ids(route_rate=0.01) == base
    assert corpus_ids(reversed_params=True) == base


def test_result_ids_are_the_same_in_another_process() -> None:
    # No per-process salt (str hashes, dict order) reaches an id: another process, with
    # another PYTHONHASHSEED, computes the same ones.
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    code = ("import json; from tests.unit.test_result_contract import corpus_ids; "
            "print(json.dumps(corpus_ids()))")
    env = {**os.environ, "PYTHONHASHSEED": "12345",
           "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True,
                         capture_output=True, text=True, timeout=120).stdout
    assert json.loads(out.strip().splitlines()[-1]) == corpus_ids()
