"""`evalstream eval` says so when nothing was evaluated because items matched no route, or
were sampled out."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from evalstream.app import offline

WARNING = "evalstream eval: warning: nothing was evaluated"


def parse(*argv: str | Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    offline.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


def evaldata(i: int, evaluator: str) -> dict[str, Any]:
    return {"id": f"x-{i}", "evaluator": evaluator, "input": "q", "output": "No.",
            "criteria": None, "role": None, "turns": None, "label": True, "source": "test"}


def run_eval(tmp_path: Path, config: str, rows: list[dict[str, Any]],
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    (tmp_path / "c.yaml").write_text(config, encoding="utf-8")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                       encoding="utf-8")
    code = offline.main(parse("--config", tmp_path / "c.yaml", "--input", tmp_path / "in.jsonl",
                              "--concurrency", "2", "--no-progress"))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SUPPORT = ("routes:\n  - name: support\n"
           "    match: {app: [support-bot], attributes: {environment: [production]}}\n"
           "    evaluators: [{evaluator: refusal}]\n")


def test_evaldata_items_no_route_matches_are_explained(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Was: "3 items, 3 without results (no_route: 3)", an empty table and exit 0, nothing on
    # stderr to say the routes match on app and the items' app is their data set.
    code, out, err = run_eval(tmp_path, SUPPORT,
                              [evaldata(i, "refusal") for i in range(3)], capsys)
    assert code == 0  # valid config, readable input: as when everything is sampled out
    assert "3 items, 3 without results (no_route: 3)" in out
    assert WARNING in err
    assert "3 of 3 items matched no route" in err
    assert "support: app in ['support-bot'] and attributes.environment in ['production']" in err
    assert "The items' app values: 'refusal' (3)." in err
    assert "evaldata items carry their data set's evaluator as app" in err


def test_prefixes_are_said_in_words(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # "app in ['checkout-*']" would read as the literal value.
    config = ("routes:\n  - name: shop\n    match: {app: [cart, checkout-*], "
              "attributes: {model: gpt-4o-mini*, env: '*'}}\n"
              "    evaluators: [{evaluator: refusal}]\n")
    _, _, err = run_eval(tmp_path, config, [{"event_id": "e1", "output": "Sure."}], capsys)
    assert ("shop: (app in ['cart'] or starting with 'checkout-') and attributes.model "
            "starting with 'gpt-4o-mini' and attributes.env present.") in err


def test_trace_events_without_app_are_explained_without_the_evaldata_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_eval(tmp_path, SUPPORT, [
        {"event_id": "e1", "output": "Sure."},
        {"event_id": "e2", "app": "shop", "output": "Sure."}], capsys)
    assert code == 0
    assert "2 of 2 items matched no route" in err
    assert "'shop' (1)" in err
    assert "no app (1)" in err
    assert "evaldata" not in err


def test_none_evaluated_with_some_sampled_out_and_the_rest_unrouted_is_explained(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The routed items' stratum is sampled at 0, the others match no route: nothing is
    # evaluated, and routing is part of why.
    config = ("routes:\n  - name: bot\n    match: {app: [bot]}\n"
              "    strata: {by: app, rates: {bot: 0.0}}\n"
              "    evaluators: [{evaluator: refusal}]\n")
    rows = [{"event_id": f"e{i}", "app": "bot" if i % 2 else "other", "output": "Sure."}
            for i in range(10)]
    code, out, err = run_eval(tmp_path, config, rows, capsys)
    assert code == 0
    assert "10 without results (no_route: 5, sampling: 5)" in out
    assert "5 of 10 items matched no route (no_route: 5, sampling: 5)" in err
    assert "5 of 10 items were sampled out" in err  # and sampling is the other half


SAMPLED = ("routes:\n  - name: bot\n    sample_rate: {rate}\n"
           "    evaluators: [{{evaluator: refusal, sample_rate: {evaluator}}}]\n")


@pytest.mark.parametrize(("rate", "evaluator"), [(0.0, 1.0), (1.0, 0.001)])
def test_every_item_sampled_out_is_explained(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: float,
        evaluator: float) -> None:
    # Was: "3 items, 3 without results (sampling: 3)", an empty table, exit 0 and nothing
    # on stderr to say eval samples as the worker does, nor how to score everything
    # (--no-sampling).
    rows = [{"event_id": f"e{i}", "output": "Sure."} for i in range(3)]
    code, out, err = run_eval(tmp_path, SAMPLED.format(rate=rate, evaluator=evaluator), rows,
                              capsys)
    assert code == 0
    assert "3 items, 3 without results (sampling: 3)" in out
    assert ("evalstream eval: warning: nothing was evaluated: 3 of 3 items were sampled out. "
            "eval applies the config's sample rates") in err
    assert "Pass --no-sampling to score every routed item" in err
    assert "matched no route" not in err


def test_no_warning_when_some_items_are_evaluated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ("routes:\n  - name: bot\n    match: {app: [bot]}\n"
              "    evaluators: [{evaluator: refusal}]\n")
    rows = [{"event_id": f"e{i}", "app": "bot" if i % 2 else "other", "output": "Sure."}
            for i in range(4)]
    code, out, err = run_eval(tmp_path, config, rows, capsys)
    assert code == 0
    assert "4 items, 2 without results (no_route: 2)" in out
    assert "warning" not in err
