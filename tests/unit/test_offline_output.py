"""What `evalstream eval` prints where: the summary on stdout, everything else on stderr;
with ``--json``, one JSON document on stdout built from the table's own figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from evalstream.app import offline


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
