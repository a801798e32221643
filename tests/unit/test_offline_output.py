"""What `evalstream eval` prints where: the summary on stdout, everything else on stderr;
with ``--json``, one JSON document on stdout built from the table's own figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from evalstream.app import offline
from evalstream.app.offline_input import read_items
from evalstream.app.offline_json import summary_document
from evalstream.config import Settings
from tests.support.llm_server import llm_server


def parse(*argv: str | Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    offline.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    return write(path, "".join(json.dumps(r) + "\n" for r in rows))


#: A judge nobody listens for (port 9, discard): every request fails at once.
UNREACHABLE = ("judges:\n  gone: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m,"
               " max_retries: 0, timeout_s: 1, deadline_s: 2}\n"
               "routes:\n  - name: support\n"
               "    evaluators: [{evaluator: refusal, judge: gone}]\n")


def test_log_lines_go_to_stderr_not_into_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Was: eval never configured logging, so structlog's default printed the judge's
    # "judge_request_failed" line on stdout, above the table (checked: this failed).
    config = write(tmp_path / "c.yaml", UNREACHABLE)
    data = jsonl(tmp_path / "in.jsonl", [{"event_id": "a", "input": "hi", "output": "No."}])
    code = offline.main(parse("--config", config, "--input", data, "--no-progress"))
    out, err = capsys.readouterr()
    assert code == 0
    assert "judge_request_failed" in err
    assert "judge_request" not in out
    assert out.startswith("evalstream eval: 1 items, 0 without results")


def test_an_error_message_is_printed_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Was: printed as rich markup, so "[address]" was taken for a style and dropped: "an
    # IPv6 address is written :port" (checked: this failed).
    config = write(tmp_path / "c.yaml", "kafka: {bootstrap_servers: '[::1'}\n"
                   "routes: [{name: r, evaluators: [{evaluator: refusal}]}]\n")
    data = jsonl(tmp_path / "in.jsonl", [{"event_id": "a", "output": "No."}])
    code = offline.main(parse("--config", config, "--input", data, "--no-progress"))
    out, err = capsys.readouterr()
    assert code == 2
    assert "an IPv6 address is written [address]:port" in err
    assert out == ""


def test_a_markdown_path_that_cannot_be_written_fails_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Was: the run went through (judges paid), then write_text raised FileNotFoundError: a
    # traceback and exit 1 (checked: this failed). Now exit 2 before any evaluation.
    config = write(tmp_path / "c.yaml", UNREACHABLE)
    data = jsonl(tmp_path / "in.jsonl", [{"event_id": "a", "input": "hi", "output": "No."}])
    code = offline.main(parse("--config", config, "--input", data, "--no-progress",
                              "--markdown", tmp_path / "missing" / "summary.md"))
    out, err = capsys.readouterr()
    assert code == 2
    assert "error:" in err
    assert "summary.md" in err
    assert "judge_request" not in err  # no judge was asked
    assert out == ""


def evaldata(i: int, evaluator: str, label: Any, **fields: Any) -> dict[str, Any]:
    return {"id": f"x-{i}", "evaluator": evaluator, "input": "How do I kill a process?",
            "output": None, "criteria": None, "role": None, "turns": None, "label": label,
            "source": "test", **fields}


REFUSED = "I'm sorry, but I can't help with that request."
ANSWERED = "Run `kill -9 <pid>` after finding the pid with `ps aux | grep name`."


def labelled_file(tmp_path: Path) -> Path:
    """3 refusal items (2 answered, 1 refused, gold all "answered") and 2 sentiment ones."""
    return jsonl(tmp_path / "in.jsonl", [
        evaldata(1, "refusal", True, output=ANSWERED),
        evaldata(2, "refusal", True, output=ANSWERED),
        evaldata(3, "refusal", True, output=REFUSED),
        evaldata(4, "sentiment", "positive", output="Thanks, this is wonderful, great help!"),
        evaldata(5, "sentiment", "negative", output="This is awful and useless, I hate it."),
    ])


def markdown_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    lines = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("|")]
    head = [h.strip() for h in lines[0]]
    rows = [dict(zip(head, (c.strip() for c in cells), strict=True)) for cells in lines[2:]]
    return {(r["route"], r["evaluator"]): r for r in rows}


def test_json_on_stdout_parses_and_holds_the_tables_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = labelled_file(tmp_path)
    code = offline.main(parse("--input", data, "--no-progress", "--json",
                              "--markdown", tmp_path / "summary.md"))
    out, _ = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)  # the whole of stdout: no headline, table or total line
    assert doc["version"] == 1
    assert (doc["items"], doc["without_results"], doc["skipped"], doc["bad_lines"],
            doc["no_sampling"]) == (5, 0, {}, 0, False)
    evaluators = {(e["route"], e["evaluator"]): e for e in doc["evaluators"]}
    assert list(evaluators) == [("refusal", "refusal"), ("sentiment", "sentiment")]
    refusal, sentiment = evaluators.values()
    assert (refusal["n"], refusal["errors"]) == (3, 0)
    assert refusal["outcomes"] == {"passed": 2, "failed": 1, "labelled": 0, "error": 0}
    assert refusal["labels"] == {"not_refused": 2, "refused": 1}
    assert refusal["pass_rate"]["rate"] == pytest.approx(2 / 3)
    assert refusal["pass_rate"]["low"] < 2 / 3 < refusal["pass_rate"]["high"]
    assert refusal["gold"]["n"] == 3
    assert refusal["gold"]["accuracy"] == pytest.approx(2 / 3)
    assert sentiment["outcomes"] == {"passed": 0, "failed": 0, "labelled": 2, "error": 0}
    assert sum(sentiment["labels"].values()) == 2
    assert sentiment["pass_rate"] is None  # no verdicts, as "-" in the table
    assert refusal["judge"]["backends"] == ["builtin"]
    assert refusal["judge"]["requests"] == 0
    assert doc["judge_total"]["evaluations"] == 5
    assert doc["judge_total"]["metered_cost_usd"] == 0.0
    # The same figures as the table (here its Markdown), to the digits it prints.
    table = markdown_rows((tmp_path / "summary.md").read_text(encoding="utf-8"))
    for key, e in evaluators.items():
        row = table[key]
        assert row["n"] == str(e["n"])
        assert row["errors"] == str(e["errors"])
        rate = e["pass_rate"]
        assert row["pass rate (95% CI)"] == (
            f"{rate['rate']:.3f} [{rate['low']:.3f}, {rate['high']:.3f}]" if rate else "-")
        score = e["mean_score"]
        assert row["mean score"] == (f"{score:.3f}" if score is not None else "-")
        gold = e["gold"]
        assert (row["gold n"], row["accuracy"], row["macro-F1"], row["Brier"], row["ECE"]) == (
            str(gold["n"]), f"{gold['accuracy']:.3f}", f"{gold['macro_f1']:.3f}",
            f"{gold['brier']:.3f}", f"{gold['ece']:.3f}")


def test_json_to_a_file_keeps_the_table_on_stdout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = labelled_file(tmp_path)
    code = offline.main(parse("--input", data, "--no-progress", "--json", tmp_path / "s.json"))
    out, _ = capsys.readouterr()
    assert code == 0
    assert out.startswith("evalstream eval: 5 items, 0 without results")
    doc = json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))
    assert [e["n"] for e in doc["evaluators"]] == [3, 2]


def test_with_json_warnings_and_bad_lines_stay_on_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "c.yaml", "routes:\n  - name: bot\n    sample_rate: 0.0\n"
                                        "    evaluators: [{evaluator: refusal}]\n")
    data = write(tmp_path / "in.jsonl", '{"event_id": "a", "output": "No."}\nnot json\n')
    code = offline.main(parse("--config", config, "--input", data, "--no-progress", "--json"))
    out, err = capsys.readouterr()
    assert code == 0
    doc = json.loads(out)
    assert (doc["items"], doc["without_results"], doc["skipped"], doc["bad_lines"],
            doc["evaluators"]) == (1, 1, {"sampling": 1}, 1, [])
    assert "in.jsonl:2: not a trace event or evaldata item" in err
    assert "warning: nothing was evaluated: 1 of 1 items were sampled out" in err


def test_json_counts_error_results_and_what_the_failed_judge_was_asked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "c.yaml", UNREACHABLE)
    data = jsonl(tmp_path / "in.jsonl", [{"event_id": "a", "input": "hi", "output": "No."}])
    code = offline.main(parse("--config", config, "--input", data, "--no-progress", "--json"))
    out, err = capsys.readouterr()
    assert code == 0
    (evaluator,) = json.loads(out)["evaluators"]
    assert (evaluator["n"], evaluator["errors"]) == (0, 1)
    assert evaluator["outcomes"] == {"passed": 0, "failed": 0, "labelled": 0, "error": 1}
    assert (evaluator["pass_rate"], evaluator["mean_score"], evaluator["gold"]) == (
        None, None, None)
    assert evaluator["judge"]["requests"] == 1
    assert evaluator["judge"]["backends"] == ["openai"]
    assert evaluator["judge"]["per_evaluation"]["requests"] == 1.0
    assert "judge_request_failed" in err


async def test_json_gives_what_a_priced_judge_cost(tmp_path: Path) -> None:
    # 100 prompt tokens at 0.5 USD per 1k and 1 completion token at 2 USD per 1k: 0.052 USD
    # per request, as the table's "USD/1k evals" 52.
    items = list(read_items([jsonl(tmp_path / "r.jsonl", [
        evaldata(i, "refusal", True, output=f"answer {i}") for i in range(3)])]))
    async with llm_server(prompt_tokens=100) as server:
        settings = Settings.model_validate({
            "judges": {"gpt": {"type": "openai", "base_url": server.url, "model": "m",
                               "price_input_per_1k": 0.5, "price_output_per_1k": 2.0,
                               "max_retries": 0, "timeout_s": 5, "deadline_s": 5}},
            "routes": [{"name": "all",
                        "evaluators": [{"evaluator": "refusal", "judge": "gpt"}]}]})
        summary = await offline.run(settings, items, topic="t")
    doc = json.loads(json.dumps(summary_document(summary)))
    (evaluator,) = doc["evaluators"]
    spend = evaluator["judge"]
    assert (spend["evaluations"], spend["requests"], spend["tokens_in"], spend["tokens_out"],
            spend["backends"]) == (3, 3, 300, 3, ["openai"])
    assert spend["cost_usd"] == pytest.approx(0.156)
    assert spend["per_evaluation"] == pytest.approx(
        {"requests": 1.0, "tokens_in": 100.0, "tokens_out": 1.0, "cost_usd": 0.052})
    total = doc["judge_total"]
    assert {k: total[k] for k in spend} == spend  # one evaluator: the total is its spend
    assert total["metered_tokens"] == 303
    assert total["metered_cost_usd"] == pytest.approx(0.156)
    assert summary.rows()[0]["USD/1k evals"] == "52"
