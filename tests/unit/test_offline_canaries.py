"""Canaries in `evalstream eval` input are counted as the worker counts them: out of the
pass rates and outcome counts (they are planted, not traffic), in the gold comparison
against the gold answer each carries, and in what the judge cost."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evalstream.app import offline

CONFIG = ("routes:\n  - name: support\n    evaluators:\n"
          "      - {evaluator: refusal}\n"
          "      - {evaluator: sentiment, params: {source: output}}\n")

REFUSAL = "I'm sorry, but I can't help with that request."
ANSWER = "Sure: open Settings, then Billing, and choose Add card."


def event(i: int, output: str, **attributes: str) -> dict[str, Any]:
    return {"event_id": f"e{i}", "input": "How do I add a card?", "output": output,
            "attributes": attributes}


def canary(i: int, output: str, **gold: str) -> dict[str, Any]:
    return event(i, output, **{"evalstream.canary": "true"},
                 **{f"evalstream.gold.{k}": v for k, v in gold.items()})


def run_json(tmp_path: Path, rows: list[dict[str, Any]]) -> dict[str, Any]:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "summary.json"
    parser = argparse.ArgumentParser()
    offline.add_arguments(parser)
    args = parser.parse_args(["--config", str(config), "--input", str(data), "--no-progress",
                              "--json", str(out), "--markdown", str(tmp_path / "s.md")])
    assert offline.main(args) == 0
    return json.loads(out.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_canaries_stay_out_of_pass_rates_and_are_compared_with_their_gold(
        tmp_path: Path) -> None:
    traffic = [event(i, ANSWER) for i in range(4)]
    # Two refusal canaries: one the builtin judge gets right (a refusal, gold "false":
    # not passing), one whose gold says the opposite of what it sees (disagreement).
    canaries = [canary(10, REFUSAL, refusal="false"), canary(11, ANSWER, refusal="false"),
                canary(12, ANSWER, sentiment="positive")]
    doc = run_json(tmp_path, traffic + canaries)
    rows = {r["evaluator"]: r for r in doc["evaluators"]}
    refusal, sentiment = rows["refusal"], rows["sentiment"]
    # Traffic alone: four answers, all passing. Counted as traffic, the refusal canary
    # would have pulled the pass rate to 6/7 (checked: that is what eval printed before).
    # Every evaluator of the route scores a canary, one without gold for it too.
    assert (refusal["n"], refusal["canaries"]) == (4, 3)
    assert refusal["pass_rate"]["rate"] == 1.0
    assert refusal["outcomes"] == {"passed": 4, "failed": 0, "labelled": 0, "error": 0}
    assert refusal["gold"]["n"] == 2
    assert refusal["gold"]["accuracy"] == 0.5
    assert (sentiment["n"], sentiment["canaries"]) == (4, 3)
    assert sentiment["gold"]["n"] == 1  # only one canary gave a sentiment gold answer
    # The judge's work on canaries is work all the same.
    assert refusal["judge"]["evaluations"] == 7
    table = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "| canaries |" in table.splitlines()[0] + " |"


def test_no_canaries_column_without_canaries(tmp_path: Path) -> None:
    doc = run_json(tmp_path, [event(1, ANSWER)])
    assert doc["evaluators"][0]["canaries"] == 0
    assert "canaries" not in (tmp_path / "s.md").read_text(encoding="utf-8")
