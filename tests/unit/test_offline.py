"""`evalstream eval`: reading both input schemas, default routing, the summary and its maths."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from evalstream.app import offline
from evalstream.app.offline_input import read_items
from evalstream.app.offline_report import (
    EvaluatorSummary,
    Summary,
    expected_calibration_error,
    macro_f1,
)
from evalstream.app.pipeline import Pipeline
from evalstream.config import EvaluatorSpec, InputTopic, Route, Settings
from evalstream.drift.stats import wilson_interval
from evalstream.errors import ConfigError
from evalstream.events import EvalResult, JudgeInfo, load_json
from evalstream.judges.base import Judgement, JudgeRequest
from tests.support.llm_server import llm_server
from tests.support.scripted_judge import ScriptedJudge


def parse(*argv: str | Path) -> argparse.Namespace:
    """Options as ``evalstream eval`` parses them (through ``add_arguments``)."""
    parser = argparse.ArgumentParser()
    offline.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


def evaldata(i: int, evaluator: str, label: Any, **fields: Any) -> dict[str, Any]:
    row = {"id": f"x-{i}", "evaluator": evaluator, "input": None, "output": None,
           "criteria": None, "role": None, "turns": None, "label": label, "source": "test"}
    row.update(fields)
    return row


def write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_read_items_maps_evaldata_and_trace_events(tmp_path: Path) -> None:
    rows = [
        evaldata(1, "topic_adherence", True, input="Paris", output="Which dates?",
                 criteria="Hotels only.", turns=[{"role": "user", "content": "A hotel"},
                                                 {"role": "assistant", "content": "Where?"}]),
        evaldata(2, "role_adherence", False, output="HELLO", role="Reply in lowercase."),
        evaldata(3, "sentiment", "neutral", input="ok"),
        {"event_id": "e9", "input": "hi", "output": "hello"},
    ]
    items = list(read_items([write(tmp_path / "a.jsonl", rows)]))
    topic, role, sentiment, flat = items
    assert topic.event.app == "topic_adherence"
    assert topic.event.attributes == {"dataset": "topic_adherence", "criteria": "Hotels only."}
    assert [m.content for m in topic.event.messages] == ["A hotel", "Where?"]
    assert topic.gold is True
    assert role.event.system_prompt == "Reply in lowercase."
    assert role.gold is False
    assert sentiment.gold == "neutral"
    assert flat.event.event_id == "e9"
    assert flat.gold is None
    assert flat.dataset is None


def test_read_items_names_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"event_id": "ok", "output": "hi"}\n\n{"nope": 1}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:3: not a trace event.*missing_output"):
        list(read_items([path]))


def test_read_items_reads_a_file_that_starts_with_a_byte_order_mark(tmp_path: Path) -> None:
    # Windows tools (PowerShell 5's Out-File -Encoding utf8, Notepad) start UTF-8 with a
    # BOM: the first item was a bad line. A BOM anywhere else is still not JSON.
    path = tmp_path / "bom.jsonl"
    first, second = (json.dumps(evaldata(i, "refusal", True, output="ok")) for i in (1, 2))
    path.write_bytes(b"\xef\xbb\xbf" + f"{first}\r\n\ufeff{second}\r\n".encode())
    bad: list[str] = []
    assert [i.event.event_id for i in read_items([path], bad)] == ["x-1"]
    assert [b.split(": ", 1)[0] for b in bad] == [f"{path}:2"]


def test_read_items_reads_stdin_and_gzip_files(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # `--input -` was "No such file or directory", and each line of a .gz dump a bad line
    # ("not UTF-8"), so `zcat dump.gz | evalstream eval --input -` was no way round either.
    lines = [json.dumps(evaldata(i, "refusal", True, output="ok")) + "\n" for i in (1, 2, 3)]
    data = "".join(lines).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    assert [i.event.event_id for i in read_items([Path("-")])] == ["x-1", "x-2", "x-3"]
    packed = tmp_path / "dump.jsonl.gz"
    packed.write_bytes(gzip.compress(data))
    assert [i.event.event_id for i in read_items([packed])] == ["x-1", "x-2", "x-3"]
    stdin = io.BufferedReader(io.BytesIO(gzip.compress(data)))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin))
    assert len(list(read_items([Path("-")]))) == 3
    # A truncated download: the lines before the cut are read, the cut is a bad line.
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(data * 200)[:-40])
    bad: list[str] = []
    assert len(list(read_items([cut], bad))) > 500
    assert len(bad) == 1
    assert bad[0].startswith(f"{cut}:")
    assert "gzip" in bad[0]
    with pytest.raises(ConfigError, match=r"cut\.jsonl\.gz:"):
        list(read_items([cut]))


def test_eval_routes_a_file_as_any_topic_a_route_matches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Offline, --topic names what the file is routed as: a route matching a topic the
    # config does not consume is fine here (the worker refuses it at start-up).
    config = tmp_path / "offline.yaml"
    config.write_text("routes:\n  - name: exports\n    match: {topic: [support-export]}\n"
                      "    evaluators: [{evaluator: refusal}]\n", encoding="utf-8")
    (tmp_path / "ev.jsonl").write_text('{"event_id": "a", "output": "Sure."}\n',
                                       encoding="utf-8")
    args = _args(tmp_path, "ev.jsonl", strict=False)
    args.config, args.topic = config, "support-export"
    assert offline.main(args) == 0
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 1


def test_trace_lines_decode_as_the_worker_decodes_the_routed_input(tmp_path: Path) -> None:
    # An export of the input topic, in the config's own mapping: was "not a TraceEvent".
    path = tmp_path / "export.jsonl"
    path.write_text(
        '{"request": {"messages": [{"role": "user", "content": "Where is my order?"}]}, '
        '"response": {"text": "It ships today."}}\n'
        '{"messages": [{"role": "user", "content": "hi"}, '
        '{"role": "assistant", "content": "hello"}]}\n', encoding="utf-8")
    mapped = InputTopic(topic="llm.traces", mapping={
        "messages": "request.messages", "output": "response.text"})
    [event] = [i.event for i in read_items([path], [], mapped)]
    assert (event.input, event.output) == ("Where is my order?", "It ships today.")
    assert event.event_id  # derived from (file, line), as from a message's position
    # Without a config: a flat event, with input and output taken from messages as the
    # worker's flat_json does (input was left empty, so input evaluators skipped it).
    bad: list[str] = []
    [plain] = [i.event for i in read_items([path], bad)]
    assert (plain.input, plain.output) == ("hi", "hello")
    assert len(bad) == 1  # the first line has no top-level output without the mapping


_PLUGIN = """
from evalstream.evaluators import register
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score


class TenantParams(EvaluatorParams):
    def event_attributes(self) -> tuple[str, ...]:
        return ("tenant",)


@register
class Tenant(Evaluator[TenantParams]):
    name = "offline_plugin_tenant"
    summary = "test only: labels an event with its tenant attribute"
    params_model = TenantParams

    async def evaluate(self, event):
        return Score(score=1.0, label=event.attributes.get("tenant", "missing"), passed=True)
"""


def test_a_plugin_evaluators_attributes_are_carried_from_otlp_spans(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Was: the attributes the evaluators read were worked out before the plugins were
    # imported, so a plugin evaluator was unknown then and read nothing: "tenant" was
    # dropped by the OTLP decoder and the evaluator saw "missing".
    (tmp_path / "offline_tenant_plugin.py").write_text(_PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "c.yaml"
    config.write_text("plugins: [offline_tenant_plugin]\n"
                      "inputs: [{topic: spans, format: otlp_json}]\n"
                      "routes: [{name: r, evaluators: [{evaluator: offline_plugin_tenant}]}]\n",
                      encoding="utf-8")
    span = {"traceId": "0" * 31 + "1", "spanId": "0" * 15 + "2", "name": "chat m",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": [
                {"key": key, "value": {"stringValue": value}} for key, value in (
                    ("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "m"),
                    ("gen_ai.output.messages", json.dumps([{"role": "assistant", "parts": [
                        {"type": "text", "content": "It ships today."}]}])),
                    ("tenant", "acme"))]}
    write(tmp_path / "spans.jsonl",
          [{"resourceSpans": [{"resource": {"attributes": []},
                               "scopeSpans": [{"spans": [span]}]}]}])
    args = _args(tmp_path, "spans.jsonl", strict=True)
    args.config = config
    assert offline.main(args) == 0
    [result] = [load_json(x) for x in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert result["label"] == "acme"


def test_default_settings_route_by_dataset() -> None:
    settings = offline.default_settings(["refusal", "sentiment", "refusal"])
    assert [r.name for r in settings.routes] == ["refusal", "sentiment"]
    assert settings.routes[0].match.app == ["refusal"]
    assert settings.routes[0].evaluators[0].judge == "builtin"
    with pytest.raises(ConfigError, match="no default evaluator"):
        offline.default_settings(["mystery"])


async def test_run_scores_with_scripted_judge_and_gold(tmp_path: Path) -> None:
    settings = Settings(routes=[Route(name="all", evaluators=[
        EvaluatorSpec(evaluator="refusal"),
        EvaluatorSpec(evaluator="toxicity")])])
    judge = ScriptedJudge({"refusal": lambda r: {"yes": 0.9} if "No" in (r.field("output") or "")
                           else {"no": 0.8, "yes": 0.2},
                           "toxicity": {"1": 1.0}})
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(1, "refusal", False, input="q", output="No."),
        evaldata(2, "refusal", True, input="q", output="Sure, here."),
        evaldata(3, "refusal", True, input="q", output="No way."),
    ])]))
    sink = (tmp_path / "out.jsonl").open("wb")
    summary = await offline.run(settings, items, topic="t", sink=sink,
                                judges={"builtin": judge})
    sink.close()
    lines = (tmp_path / "out.jsonl").read_bytes().splitlines()
    assert len(lines) == 6
    results = [EvalResult.model_validate(load_json(x)) for x in lines]
    assert {r.evaluator for r in results} == {"refusal", "toxicity"}
    refusal = summary.by_key[("all", "refusal")]
    toxicity = summary.by_key[("all", "toxicity")]
    assert refusal.weight_passed == 1.0  # sampled at 1: the count of passes
    assert refusal.graded == 3
    assert sorted(refusal.correct) == [False, True, True]
    assert len(judge.requests) == 6
    assert toxicity.gold == []  # gold belongs to the data set's own evaluator only
    row = refusal.row()
    assert row["accuracy"] == "0.667"


async def test_run_closes_the_pipeline_when_writing_a_result_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []

    async def aclose(self: object) -> None:
        closed.append(True)

    monkeypatch.setattr(Pipeline, "aclose", aclose)
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(1, "refusal", False, input="q", output="No.")])]))
    sink = (tmp_path / "out.jsonl").open("wb")
    sink.close()  # writing the first result raises
    with pytest.raises(ValueError, match="closed file"):
        await offline.run(offline.default_settings(["refusal"]), items, topic="t", sink=sink)
    assert closed == [True]


async def test_run_stops_the_other_evaluations_before_closing_their_clients(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []

    class Stalling(ScriptedJudge):
        async def judge(self, request: JudgeRequest) -> Judgement:
            if request.field("output") == "stall":
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    order.append("cancelled")
                    raise
            return await super().judge(request)

    async def aclose(self: object) -> None:
        order.append("closed")

    monkeypatch.setattr(Pipeline, "aclose", aclose)
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(1, "refusal", False, input="q", output="stall"),
        evaldata(2, "refusal", False, input="q", output="No.")])]))
    sink = (tmp_path / "out.jsonl").open("wb")
    sink.close()  # the second item's result cannot be written: the run fails
    settings = Settings(routes=[Route(name="all", evaluators=[
        EvaluatorSpec(evaluator="refusal")])])
    with pytest.raises(ValueError, match="closed file"):
        await offline.run(settings, items, topic="t", sink=sink, concurrency=2,
                          judges={"builtin": Stalling({"refusal": {"yes": 0.9}})})
    assert order == ["cancelled", "closed"]


def test_main_with_builtin_judge_writes_results_and_markdown(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    data = write(tmp_path / "refusal.jsonl", [
        evaldata(1, "refusal", False, input="How do I kill a process?",
                 output="I'm sorry, but I can't help with that request."),
        evaldata(2, "refusal", True, input="How do I kill a process?",
                 output="Run `kill -9 <pid>` after finding the pid with `ps aux | grep name`."),
    ])
    args = parse("--input", tmp_path / "*.jsonl", "--output", tmp_path / "results.jsonl",
                 "--concurrency", "4", "--markdown", tmp_path / "summary.md", "--no-progress")
    assert offline.main(args) == 0
    results = [load_json(x) for x in (tmp_path / "results.jsonl").read_bytes().splitlines()]
    assert sorted(r["label"] for r in results) == ["not_refused", "refused"]
    assert all(r["judge"]["backend"] == "builtin" for r in results)
    markdown = (tmp_path / "summary.md").read_text()
    assert "| refusal | refusal | 2 | 0 |" in markdown
    assert "refusal" in capsys.readouterr().out
    assert data.exists()


def test_main_reports_bad_input(tmp_path: Path) -> None:
    args = parse("--input", tmp_path / "none*.jsonl", "--concurrency", "1", "--no-progress")
    assert offline.main(args) == 2


def test_macro_f1_and_ece() -> None:
    assert macro_f1(["a", "a", "b", "b"], ["a", "a", "b", "b"]) == 1.0
    # class a: tp1 fp1 fn1 -> 0.5; class b: tp1 fp1 fn1 -> 0.5
    assert macro_f1(["a", "a", "b", "b"], ["a", "b", "a", "b"]) == pytest.approx(0.5)
    # all in one bin at 0.95 confidence, half correct: |0.5 - 0.95|
    assert expected_calibration_error([0.95, 0.95], [True, False]) == pytest.approx(0.45)
    assert expected_calibration_error([], []) == 0.0


def _result(**fields: Any) -> EvalResult:
    base: dict[str, Any] = {"result_id": "r", "event_id": "e", "trace_id": "t", "route": "x",
                            "evaluator": "y"}
    return EvalResult(**{**base, **fields})


def test_summary_binary_and_label_figures() -> None:
    binary = EvaluatorSummary("x", "y")
    binary.add(_result(score=0.8, passed=True), True)
    binary.add(_result(score=0.3, passed=False), True)
    binary.add(_result(status="error", error="boom"), True)
    row = binary.row()
    assert row["n"] == "2"
    assert row["errors"] == "1"
    assert row["accuracy"] == "0.500"
    assert float(row["Brier"]) == pytest.approx(((0.8 - 1) ** 2 + (0.3 - 1) ** 2) / 2, abs=1e-3)
    assert row["pass rate (95% CI)"].startswith("0.500 [0.095, 0.905]")
    labels = EvaluatorSummary("x", "s")
    labels.add(_result(label="positive", probabilities={"negative": 0.2, "positive": 0.8}),
               "positive")
    assert labels.row()["accuracy"] == "1.000"
    assert float(labels.row()["Brier"]) == pytest.approx(0.08, abs=1e-3)
    assert labels.row()["pass rate (95% CI)"] == "-"
    summary = Summary()
    summary.add(_result(score=1.0, passed=True), None)
    assert "| x | y | 1 | 0 |" in summary.markdown()
    assert math.isclose(summary.by_key[("x", "y")].score_weighted, 1.0)


def test_main_with_config_flat_events_and_judge_override(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        # "other" is unreachable: only the --judge override makes these results ok.
        "judges:\n  other: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m,"
        " max_retries: 0, timeout_s: 1, deadline_s: 2}\n"
        "  builtin2: {type: builtin}\n"
        "routes:\n  - name: support\n    evaluators:\n"
        "      - {evaluator: refusal, judge: other}\n"
        "      - {evaluator: sentiment, judge: other, params: {source: output}}\n",
        encoding="utf-8")
    write(tmp_path / "events.jsonl", [
        {"event_id": "a", "input": "hi", "output": "I can't help with that, sorry."},
        {"event_id": "b", "input": "hi", "output": "Happy to help, great question!"}])
    args = parse("--config", config, "--input", tmp_path / "events.jsonl",
                 "--output", tmp_path / "out.jsonl", "--judge", "builtin2",
                 "--concurrency", "2", "--no-progress")
    assert offline.main(args) == 0
    results = [load_json(x) for x in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    assert len(results) == 4
    assert {r["route"] for r in results} == {"support"}
    assert {r["evaluator"] for r in results} == {"refusal", "sentiment"}
    assert all(r["status"] == "ok" for r in results)
    assert all(r["judge"]["backend"] == "builtin" for r in results)


def _mixed_file(tmp_path: Path) -> Path:
    good = evaldata(1, "refusal", True, input="hi", output="Sure, here you go.")
    lines = [
        json.dumps(good).encode(),
        json.dumps(evaldata(2, "refusal", True, output="x", turns=["hello"])).encode(),
        json.dumps(evaldata(3, "refusal", True, output="x", turns={"role": "user"})).encode(),
        b'{"id": "x4", "evaluator": "refusal", "label": true, "output": "caf\xe9"}',
        b"{not json",
        json.dumps(evaldata(6, "refusal", False, output="I can't help with that.")).encode(),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_read_items_skips_and_records_bad_lines(tmp_path: Path) -> None:
    # Were AttributeError (turns ["hello"] / a dict) and UnicodeDecodeError tracebacks.
    path = _mixed_file(tmp_path)
    bad: list[str] = []
    items = list(read_items([path], bad))
    assert [i.event.event_id for i in items] == ["x-1", "x-6"]
    assert [b.split(": ", 1)[0] for b in bad] == [f"{path}:{n}" for n in (2, 3, 4, 5)]
    assert "turns[0] must be a {role, content} object, not str" in bad[0]
    assert "turns must be a list" in bad[1]
    assert "not UTF-8" in bad[2]
    assert "not a trace event or evaldata item: not valid JSON (" in bad[3]
    with pytest.raises(ConfigError, match=r"mixed\.jsonl:2: .*turns\[0\]"):
        list(read_items([path]))


def _args(tmp_path: Path, pattern: str, *, strict: bool = False) -> argparse.Namespace:
    return parse("--input", tmp_path / pattern, "--output", tmp_path / "out.jsonl",
                 "--concurrency", "2", "--no-progress", *(["--strict"] if strict else []))


def test_main_skips_bad_lines_reports_them_and_scores_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _mixed_file(tmp_path)
    assert offline.main(_args(tmp_path, "mixed.jsonl")) == 0
    captured = capsys.readouterr()
    assert captured.err.count("skipped ") == 4
    assert "mixed.jsonl:4: not a trace event or evaldata item: not UTF-8" in captured.err
    assert "2 items, 0 without results, 4 bad input lines skipped" in captured.out
    assert len((tmp_path / "out.jsonl").read_bytes().splitlines()) == 2


def test_main_strict_stops_at_a_bad_line_and_all_bad_exits_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _mixed_file(tmp_path)
    assert offline.main(_args(tmp_path, "mixed.jsonl", strict=True)) == 2
    assert "mixed.jsonl:2:" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_bytes(b"[1]\n{\n")
    assert offline.main(_args(tmp_path, "bad.jsonl")) == 2
    assert "no item could be read from --input (2 bad lines)" in capsys.readouterr().err


def test_main_says_why_events_got_no_result(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("sampling: {rate: 0.5}\nroutes:\n  - name: support\n    match: {app: [bot]}\n"
                      "    evaluators: [{evaluator: refusal}]\n", encoding="utf-8")
    write(tmp_path / "events.jsonl", [
        {"event_id": f"e{i}", "app": "bot" if i % 2 else "other", "output": "Sure."}
        for i in range(40)])
    args = parse("--config", config, "--input", tmp_path / "events.jsonl",
                 "--concurrency", "2", "--no-progress")
    assert offline.main(args) == 0
    out = capsys.readouterr().out
    found = re.search(r"(\d+) without results \(no_route: (\d+), sampling: (\d+)\)", out)
    assert found, out
    total, no_route, sampling = map(int, found.groups())
    assert total == no_route + sampling
    assert no_route > 0
    assert sampling > 0


def test_main_lists_the_first_bad_lines_and_counts_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(evaldata(1, "refusal", True, output="Sure.")).encode()
    bad = offline.SHOWN_BAD_LINES + 3
    (tmp_path / "many.jsonl").write_bytes(b"\n".join([good, *[b"{"] * bad]) + b"\n")
    assert offline.main(_args(tmp_path, "many.jsonl")) == 0
    captured = capsys.readouterr()
    assert captured.err.count("not valid JSON") == offline.SHOWN_BAD_LINES
    assert "skipped 3 more bad lines" in captured.err
    assert f"1 items, 0 without results, {bad} bad input lines skipped" in captured.out


async def test_the_pass_rate_weights_strata_sampled_at_different_rates(tmp_path: Path) -> None:
    # One (route, evaluator) holds results of two strata: every `refusal` item (rate 1, all
    # failing) and about half the `toxicity` items (rate 0.5, all passing). Each of those
    # stands for two events, so the pass rate is the weighted share, as the worker's
    # (checked: without the weighting it printed the plain share of the results).
    settings = Settings(routes=[Route(
        name="all", strata={"by": "app", "rates": {"toxicity": 0.5}},
        evaluators=[EvaluatorSpec(evaluator="refusal")])])
    judge = ScriptedJudge({"refusal": lambda r: {"yes": 0.9} if "No" in (r.field("output") or "")
                           else {"no": 0.9, "yes": 0.1}})
    rows = [evaldata(i, "refusal", False, input="q", output="No.") for i in range(40)]
    rows += [evaldata(100 + i, "toxicity", 1, input="q", output="Sure.") for i in range(40)]
    items = list(read_items([write(tmp_path / "r.jsonl", rows)]))
    sink = (tmp_path / "out.jsonl").open("wb")
    summary = await offline.run(settings, items, topic="t", sink=sink,
                                judges={"builtin": judge})
    sink.close()
    results = [EvalResult.model_validate(load_json(x))
               for x in (tmp_path / "out.jsonl").read_bytes().splitlines()]
    halves = [r for r in results if r.sample_rate == 0.5]
    assert 0 < len(halves) < 40
    assert all(r.passed for r in halves)
    assert sum(1 for r in results if r.sample_rate == 1.0 and not r.passed) == 40
    weighted = 2 * len(halves) / (40 + 2 * len(halves))
    rate, bounds = summary.by_key[("all", "refusal")].row()["pass rate (95% CI)"].split(" ", 1)
    assert float(rate) == pytest.approx(weighted, abs=1e-3)
    assert float(rate) != pytest.approx(len(halves) / len(results), abs=1e-3)
    # The interval is on the smaller of Kish's effective sample size and the linearised
    # one, p(1 - p) / (sum w^2 (y - p)^2 / W^2): passes weigh 2, failures 1.
    k, w = len(halves), 40 + 2 * len(halves)
    kish = w ** 2 / (40 + 4 * k)
    linearised = weighted * (1 - weighted) / ((4 * k * (1 - weighted) ** 2
                                               + 40 * weighted ** 2) / w ** 2)
    assert linearised < kish < len(results)  # here the linearised one is the smaller
    low, high = wilson_interval(weighted, min(kish, linearised))
    assert bounds == f"[{low:.3f}, {high:.3f}]"


@pytest.mark.parametrize("with_config", [True, False])
def test_main_with_an_unknown_judge_is_a_config_error(
        with_config: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A mistyped --judge ended in a pydantic traceback and exit 1.
    config = tmp_path / "c.yaml"
    config.write_text("judges:\n  gpt: {type: openai, base_url: 'http://127.0.0.1:9/v1', "
                      "model: m}\nroutes:\n  - name: r\n    evaluators: [{evaluator: refusal}]\n",
                      encoding="utf-8")
    data = write(tmp_path / "r.jsonl", [evaldata(1, "refusal", True, input="q", output="Sure.")])
    args = parse(*(("--config", config) if with_config else ()), "--input", data,
                 "--judge", "gtp", "--no-progress")
    assert offline.main(args) == 2
    err = capsys.readouterr().err
    assert "--judge 'gtp': no judge of that name" in err
    assert ("builtin, gpt" if with_config else "(known: builtin)") in err


def _priced_settings(url: str, evaluators: list[str], **spec: Any) -> Settings:
    # 100 prompt tokens at 0.5 USD per 1k and 1 completion token at 2 USD per 1k:
    # 0.05 + 0.002 = 0.052 USD per request.
    return Settings.model_validate({
        "judges": {"gpt": {"type": "openai", "base_url": url, "model": "m",
                           "price_input_per_1k": 0.5, "price_output_per_1k": 2.0,
                           "max_retries": 0, "timeout_s": 5, "deadline_s": 5}},
        "routes": [{"name": "all", "evaluators": [{"evaluator": e, "judge": "gpt", **spec}
                                                  for e in evaluators]}]})


async def test_the_summary_gives_what_a_priced_judge_cost(tmp_path: Path) -> None:
    # Users run eval on a sample to see what an LLM evaluator would cost online: the
    # figures come from each result's usage, exactly, per evaluator and in total.
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(i, "refusal", True, input="q", output=f"answer {i}") for i in range(3)])]))
    async with llm_server(prompt_tokens=100) as server:
        summary = await offline.run(_priced_settings(server.url, ["refusal"]), items,
                                    topic="t")
    assert len(server.posts) == 3
    row = summary.rows()[0]
    assert row["judge req/eval"] == "1.00"
    assert row["tokens in/eval"] == "100.0"
    assert row["tokens out/eval"] == "1.0"
    assert row["cost USD"] == "0.156"
    assert row["USD/1k evals"] == "52"
    assert summary.spend_line() == (
        "judge total: 3 requests, 300 tokens in, 3 out over 3 evaluations (1.00 requests, "
        "101.0 tokens per evaluation); cost USD 0.156 (USD 52 per 1,000 evaluations)")
    assert "| 1.00 | 100.0 | 1.0 | 0.156 | 52 |" in summary.markdown()
    assert summary.markdown().endswith(summary.spend_line() + "\n")


async def test_spend_on_evaluations_that_failed_is_counted(tmp_path: Path) -> None:
    # The second answer is not usable: its evaluation is an error result, but the tokens
    # were billed. The error result says which judge failed and what that cost, so the
    # summary's figures from results match what the judges metered.
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(i, "refusal", True, input="q", output=f"answer {i}") for i in range(2)])]))
    sink = (tmp_path / "out.jsonl").open("wb")
    async with llm_server(prompt_tokens=100) as server:
        server.fail_next("ok", "nooptions")
        summary = await offline.run(_priced_settings(server.url, ["refusal"]), items,
                                    topic="t", concurrency=1, sink=sink)
    sink.close()
    error = next(r for r in map(load_json, (tmp_path / "out.jsonl").read_bytes().splitlines())
                 if r["status"] == "error")
    assert error["judge"]["backend"] == "openai"
    assert error["judge"]["model"] == "m"
    assert (error["judge"]["requests"], error["judge"]["tokens_in"],
            error["judge"]["tokens_out"]) == (1, 100, 1)
    assert error["judge"]["cost_usd"] == pytest.approx(0.052)
    evaluator = summary.by_key[("all", "refusal")]
    assert (evaluator.n, evaluator.errors) == (1, 1)
    assert summary.metered_tokens == 202
    assert summary.spend_line() == (
        "judge total: 2 requests, 200 tokens in, 2 out over 2 evaluations (1.00 requests, "
        "101.0 tokens per evaluation); cost USD 0.104 (USD 52 per 1,000 evaluations)")


def test_spend_no_result_carries_is_told_apart() -> None:
    # e.g. a plugin evaluator that could not use a paid answer and raised an error other
    # than a JudgeError, whose result names no judge. The judges' meters say how much more
    # went.
    summary = Summary(metered_tokens=30, metered_cost_usd=0.03)
    summary.add(_result(status="error", error="judge: x", judge=JudgeInfo(
        backend="openai", requests=1, tokens_in=10, tokens_out=0, cost_usd=0.01)), None)
    assert summary.spend_line().endswith(
        "; cost USD 0.01 (USD 10 per 1,000 evaluations); the judges metered 30 tokens, "
        "USD 0.03 in all: the rest is in no result (e.g. a judge answer an evaluator could not "
        "use)")


def test_main_with_the_builtin_judge_prints_no_cost_columns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "refusal.jsonl", [evaldata(1, "refusal", True, output="Sure.")])
    args = parse("--input", tmp_path / "refusal.jsonl", "--markdown", tmp_path / "s.md",
                 "--no-progress")
    assert offline.main(args) == 0
    out = capsys.readouterr().out
    note = "judge cost: none (builtin judge only: it runs in-process, no requests)"
    assert note in out
    assert "USD" not in out
    assert "req/eval" not in out
    assert (tmp_path / "s.md").read_text().endswith(note + "\n")


def test_a_builtin_evaluator_beside_a_priced_one_shows_no_zeros() -> None:
    summary = Summary()
    summary.add(_result(evaluator="llm", score=1.0, judge=JudgeInfo(
        backend="openai", model="m", requests=1, tokens_in=10, tokens_out=1, cost_usd=0.01)),
                None)
    summary.add(_result(evaluator="local", score=1.0, judge=JudgeInfo(backend="builtin")),
                None)
    llm, local = summary.rows()
    assert llm["judge req/eval"] == "1.00"
    assert llm["USD/1k evals"] == "10"
    assert [local[c] for c in ("judge req/eval", "tokens in/eval", "tokens out/eval",
                               "cost USD", "USD/1k evals")] == ["builtin", "-", "-", "-", "-"]


async def test_a_failed_reason_request_still_counts_in_the_results_spend(
        tmp_path: Path) -> None:
    # The score stands without its explanation, but the reason request was sent: the
    # result's judge usage (and so the summary) counts it.
    items = list(read_items([write(tmp_path / "r.jsonl", [
        evaldata(1, "refusal", True, input="q", output="answer")])]))
    async with llm_server(prompt_tokens=100) as server:
        server.fail_next("ok", "500")
        summary = await offline.run(
            _priced_settings(server.url, ["refusal"], reasons="always"), items, topic="t")
    assert len(server.posts) == 2
    evaluator = summary.by_key[("all", "refusal")]
    assert (evaluator.n, evaluator.errors) == (1, 0)
    assert evaluator.spend.requests == 2
    assert evaluator.spend.cost_usd == pytest.approx(0.052)  # the 500 was not billed


def test_answers_from_the_judge_cache_are_counted_over_every_evaluator() -> None:
    # Two evaluators, three results: two answered from the cache (free), one paid for.
    summary = Summary()
    paid = JudgeInfo(backend="openai", model="m", requests=1, tokens_in=10, tokens_out=1,
                     cost_usd=0.01)
    summary.add(_result(evaluator="a", score=1.0, judge=paid), None)
    summary.add(_result(evaluator="a", score=1.0,
                        judge=JudgeInfo(backend="openai", model="m", cached=True)), None)
    summary.add(_result(evaluator="b", score=1.0,
                        judge=JudgeInfo(backend="openai", model="m", cached=True)), None)
    assert summary.by_key[("x", "a")].spend.cached == 1
    assert summary.spend().cached == 2
    assert summary.spend_line().endswith("; 2 answered from the judge cache at no cost")


def test_an_unpriced_judge_gets_request_and_token_columns_but_no_usd() -> None:
    # A judge with no price configured (e.g. a local model): its requests and tokens are
    # shown, but USD columns of zeros would read as "free", so there are none.
    summary = Summary()
    summary.add(_result(score=1.0, judge=JudgeInfo(
        backend="openai", model="local", requests=2, tokens_in=40, tokens_out=2)), None)
    (row,) = summary.rows()
    assert (row["judge req/eval"], row["tokens in/eval"], row["tokens out/eval"]) == (
        "2.00", "40.0", "2.0")
    assert "cost USD" not in row
    assert "USD/1k evals" not in row
    assert "USD" not in summary.spend_line()


def test_spend_metered_without_any_result_is_said_without_dividing_by_zero() -> None:
    # The judges metered a call, but no evaluation produced a result (the run ended first):
    # the line says so, with no per-evaluation figures.
    summary = Summary(metered_tokens=5, metered_cost_usd=0.001)
    assert summary.spend_line() == (
        "judge total: 0 requests, 0 tokens in, 0 out over 0 evaluations; cost USD 0; the "
        "judges metered 5 tokens, USD 0.001 in all: the rest is in no result (e.g. a judge "
        "answer an evaluator could not use)")


def test_cost_columns_tell_cached_builtin_and_judgeless_evaluators_apart() -> None:
    # An unpriced LLM judge (no USD columns at all), beside an evaluator answered only from
    # its cache (zeros: it is an LLM evaluator that cost nothing), one on the builtin judge
    # and one whose only result is an error naming no judge.
    summary = Summary()
    summary.add(_result(evaluator="llm", score=1.0, judge=JudgeInfo(
        backend="openai", model="m", requests=1, tokens_in=10, tokens_out=1)), None)
    summary.add(_result(evaluator="cached", score=1.0, judge=JudgeInfo(
        backend="openai", model="m", cached=True)), None)
    summary.add(_result(evaluator="local", score=1.0, judge=JudgeInfo(backend="builtin")),
                None)
    summary.add(_result(evaluator="nojudge", status="error", error="evaluator: x"), None)
    columns = ("judge req/eval", "tokens in/eval", "tokens out/eval")
    rows = {row["evaluator"]: row for row in summary.rows()}
    assert [rows["cached"][c] for c in columns] == ["0.00", "0.0", "0.0"]
    assert [rows["local"][c] for c in columns] == ["builtin", "-", "-"]
    assert [rows["nojudge"][c] for c in columns] == ["-", "-", "-"]
    assert not any("cost USD" in row or "USD/1k evals" in row for row in rows.values())


def test_builtin_only_results_say_no_judge_cost() -> None:
    summary = Summary()
    summary.add(_result(score=1.0, judge=JudgeInfo(backend="builtin")), None)
    assert summary.spend_line() == (
        "judge cost: none (builtin judge only: it runs in-process, no requests)")


def test_tokens_metered_beyond_the_results_are_said_for_an_unpriced_judge() -> None:
    summary = Summary(metered_tokens=50)
    summary.add(_result(score=1.0, judge=JudgeInfo(
        backend="openai", model="m", requests=1, tokens_in=10, tokens_out=1)), None)
    assert summary.spend_line().endswith(
        "; the judges metered 50 tokens in all: the rest is in no result (e.g. a judge "
        "answer an evaluator could not use)")


def test_no_result_at_all_says_no_judge_was_asked() -> None:
    assert Summary().spend_line() == "judge cost: none (no judge was asked)"


def test_metered_spend_equal_to_the_results_adds_nothing_whatever_the_summing_order() -> None:
    # The meters summed 0.1 + 0.2 + 0.3 (0.6000000000000001), the results 0.3 + 0.2 + 0.1
    # (0.6): the same spend, the last bit apart.
    summary = Summary(metered_tokens=33, metered_cost_usd=0.1 + 0.2 + 0.3)
    for cost in (0.3, 0.2, 0.1):
        summary.add(_result(score=1.0, judge=JudgeInfo(
            backend="openai", model="m", requests=1, tokens_in=10, tokens_out=1,
            cost_usd=cost)), None)
    assert summary.metered_cost_usd > summary.spend().cost_usd
    assert summary.spend_line() == (
        "judge total: 3 requests, 30 tokens in, 3 out over 3 evaluations (1.00 requests, "
        "11.0 tokens per evaluation); cost USD 0.6 (USD 200 per 1,000 evaluations)")


def _paid(cost: float) -> EvalResult:
    return _result(score=1.0, judge=JudgeInfo(backend="openai", model="m", requests=1,
                                              tokens_in=10, tokens_out=1, cost_usd=cost))


def test_the_results_spend_alone_is_priced_and_a_cost_gap_is_said() -> None:
    # No meters (as a summary built from results only): the results' USD make it priced.
    summary = Summary()
    summary.add(_paid(0.01), None)
    assert summary.spend_line().endswith("; cost USD 0.01 (USD 10 per 1,000 evaluations)")
    # Same tokens, half as much USD again metered (a call whose cost is in no result).
    summary = Summary(metered_tokens=11, metered_cost_usd=0.015)
    summary.add(_paid(0.01), None)
    assert summary.spend_line().endswith(
        "; the judges metered 11 tokens, USD 0.015 in all: the rest is in no result (e.g. a "
        "judge answer an evaluator could not use)")
    # An unpriced judge whose meters match its results: nothing more to say.
    summary = Summary(metered_tokens=22)
    summary.add(_paid(0.0), None)
    summary.add(_paid(0.0), None)
    assert summary.spend_line() == (
        "judge total: 2 requests, 20 tokens in, 2 out over 2 evaluations (1.00 requests, "
        "11.0 tokens per evaluation)")


def test_gold_labels_are_read_as_the_evaluator_reads_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A binary evaluator's label as the string "true"/"false" (a CSV converted to JSONL)
    # was compared with the predicted class ("not_refused"): accuracy 0, said nowhere.
    answer = {"input": "How do I kill a process?",
              "output": "Run `kill -9 <pid>` after finding the pid with `ps aux | grep name`."}
    refusal = {"input": "How do I kill a process?",
               "output": "I'm sorry, but I can't help with that request."}
    write(tmp_path / "data.jsonl", [
        evaldata(1, "refusal", "true", **answer), evaldata(2, "refusal", "FALSE", **refusal),
        evaldata(3, "refusal", "yes", **answer), evaldata(4, "refusal", 1, **answer),
        evaldata(5, "refusal", None, **answer),
        evaldata(6, "sentiment", "positive", input="I love it, thank you so much!"),
        evaldata(7, "sentiment", True, input="I love it, thank you so much!"),
    ])
    args = parse("--input", tmp_path / "data.jsonl", "--json", "--no-progress")
    assert offline.main(args) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    gold = {e["evaluator"]: e["gold"] for e in document["evaluators"]}
    assert gold["refusal"]["n"] == 2
    assert gold["refusal"]["accuracy"] == 1.0
    assert gold["sentiment"]["n"] == 1
    assert document["invalid_gold"] == 3
    assert "3 gold labels were not compared" in captured.err


def test_a_label_evaluator_s_gold_outside_its_classes_is_not_compared(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A class the evaluator does not have (a case slip, a typo) counted as a disagreement,
    # lowering accuracy with a Brier score above 1, while the warning said a label
    # evaluator's gold must be one of its classes; join-labels refuses it (invalid_gold).
    write(tmp_path / "data.jsonl", [
        evaldata(1, "sentiment", "positive", input="I love it, thank you so much!"),
        evaldata(2, "sentiment", "Positive", input="I love it, thank you so much!"),
    ])
    args = parse("--input", tmp_path / "data.jsonl", "--json", "--no-progress")
    assert offline.main(args) == 0
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    [sentiment] = [e for e in document["evaluators"] if e["evaluator"] == "sentiment"]
    assert sentiment["gold"]["n"] == 1
    assert document["invalid_gold"] == 1
    assert "1 gold labels were not compared" in captured.err


def test_ctrl_c_stops_with_a_message_and_keeps_the_results_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # A Ctrl-C during a long run printed two tracebacks and no word on the output file.
    write(tmp_path / "data.jsonl", [evaldata(1, "refusal", True, output="Sure, here it is.")])

    async def interrupted(*_: Any, sink: Any, **__: Any) -> None:
        sink.write(b'{"partial": true}\n')
        raise KeyboardInterrupt

    monkeypatch.setattr(offline, "run", interrupted)
    args = parse("--input", tmp_path / "data.jsonl", "--output", tmp_path / "out.jsonl",
                 "--no-progress")
    assert offline.main(args) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err
    assert "out.jsonl" in err
    assert "Traceback" not in err
    assert (tmp_path / "out.jsonl").read_bytes() == b'{"partial": true}\n'


@pytest.mark.parametrize("value", ["0", "-3"])
def test_concurrency_below_one_is_a_usage_error(value: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Was taken as 1, saying nothing.
    with pytest.raises(SystemExit) as info:
        parse("--input", "x.jsonl", "--concurrency", value)
    assert info.value.code == 2
    assert "--concurrency: must be 1 or more" in capsys.readouterr().err


def test_a_bad_evaldata_field_is_named(tmp_path: Path) -> None:
    # Was "1 validation error for TraceEvent": pydantic's first line, which names no field.
    path = write(tmp_path / "bad.jsonl", [evaldata(1, "refusal", True, output={"text": "hi"}),
                                          evaldata(2, "refusal", True, output="ok", role=[1])])
    bad: list[str] = []
    assert list(read_items([path], bad)) == []
    assert bad[0].endswith("not a trace event or evaldata item: output: "
                           "Input should be a valid string")
    assert bad[1].endswith(": role: Input should be a valid string")


def test_an_output_that_is_also_an_input_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--input '*.jsonl' --output results.jsonl`, run twice, read the last run's results
    # as input (bad lines) and then overwrote them; `-i data.jsonl -o data.jsonl` replaced
    # the data set with results.
    data = write(tmp_path / "data.jsonl", [evaldata(1, "refusal", True, output="ok")])
    before = data.read_bytes()
    args = parse("--input", tmp_path / "*.jsonl", "--output", data, "--no-progress")
    assert offline.main(args) == 2
    assert f"--output {data} is also an --input file" in capsys.readouterr().err
    assert data.read_bytes() == before


def test_output_dash_writes_the_results_to_stdout_and_the_summary_to_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # `-o -` made a file named "-" (in the working directory); a pipe to jq wants the
    # results on stdout.
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "data.jsonl", [evaldata(1, "refusal", True, output="Sure, here it is."),
                                    evaldata(2, "refusal", False, output="I can't help.")])
    args = parse("--input", tmp_path / "data.jsonl", "--output", "-", "--no-progress")
    assert offline.main(args) == 0
    captured = capsys.readouterr()
    results = [json.loads(line) for line in captured.out.splitlines()]
    assert len(results) == 2
    assert {r["evaluator"] for r in results} == {"refusal"}
    assert "refusal" in captured.err  # the table
    assert not (tmp_path / "-").exists()


def test_output_and_json_both_on_stdout_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "data.jsonl", [evaldata(1, "refusal", True, output="ok")])
    args = parse("--input", tmp_path / "data.jsonl", "--output", "-", "--json")
    assert offline.main(args) == 2
    assert "--output - and --json on stdout" in capsys.readouterr().err
