"""`evalstream eval --no-sampling`: every routed item scored, whatever the config's rates."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from evalstream.app import offline
from evalstream.app.offline_settings import without_sampling
from evalstream.config import Settings
from evalstream.events import load_json


def parse(*argv: str | Path) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    offline.add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


#: Every kind of rate below 1: global, route, strata (one of them 0: off), evaluator.
CONFIG = """
sampling: {rate: 0.5}
routes:
  - name: bots
    match: {app: [a, b, "off"]}
    sample_rate: 0.5
    strata: {by: app, rates: {a: 0.2, "off": 0.0}}
    evaluators:
      - {evaluator: refusal, sample_rate: 0.3}
      - {evaluator: sentiment, params: {source: output}}
"""
PER_APP = 40


def run_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: list[dict[str, Any]],
             *options: str, config: str = CONFIG) -> tuple[int, str, str, list[dict[str, Any]]]:
    (tmp_path / "c.yaml").write_text(config, encoding="utf-8")
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                       encoding="utf-8")
    out_path = tmp_path / "out.jsonl"
    code = offline.main(parse("--config", tmp_path / "c.yaml", "--input", tmp_path / "in.jsonl",
                              "--output", out_path, "--concurrency", "2", "--no-progress",
                              *options))
    captured = capsys.readouterr()
    results = [load_json(line) for line in out_path.read_bytes().splitlines()]
    return code, captured.out, captured.err, results


def traffic() -> list[dict[str, Any]]:
    """PER_APP events of each app: a, b (the route's rate), off (stratum 0), x (no route)."""
    return [{"event_id": f"{app}-{i}", "app": app, "output": "Sure, here it is."}
            for app in ("a", "b", "off", "x") for i in range(PER_APP)]


def by_evaluator_app(results: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((r["evaluator"], r["app"]) for r in results)


def test_without_the_option_eval_samples_as_the_worker(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _, results = run_eval(tmp_path, capsys, traffic())
    assert code == 0
    counts = by_evaluator_app(results)
    # a at 0.5 x 0.2 (x 0.3 for refusal), b at 0.5 x 0.5: a sample, and nothing of "off".
    assert 0 < counts["sentiment", "b"] < PER_APP
    assert counts["sentiment", "a"] < PER_APP
    assert counts["refusal", "b"] < counts["sentiment", "b"]
    assert not any(app in ("off", "x") for _, app in counts)
    rates = {(r["evaluator"], r["app"]): r["sample_rate"] for r in results}
    assert rates.get(("sentiment", "b")) == pytest.approx(0.25)
    assert rates.get(("refusal", "b")) == pytest.approx(0.075)
    # Sampled before routed (as the worker): only items under the top rate count as no_route.
    assert "sampling: " in out


def test_no_sampling_scores_every_routed_item_with_every_evaluator(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err, results = run_eval(tmp_path, capsys, traffic(), "--no-sampling")
    assert code == 0
    # Global, route, stratum and evaluator rates all ignored: each routed item gets both
    # evaluators; routing still holds (x matches no route) and a stratum at 0 stays off.
    assert by_evaluator_app(results) == {
        ("refusal", "a"): PER_APP, ("sentiment", "a"): PER_APP,
        ("refusal", "b"): PER_APP, ("sentiment", "b"): PER_APP}
    assert {r["sample_rate"] for r in results} == {1.0}  # each weighs one item
    assert (f"{4 * PER_APP} items, {2 * PER_APP} without results "
            f"(no_route: {PER_APP}, sampling: {PER_APP})") in out
    assert "warning" not in err


def test_no_sampling_keeps_canaries_canaries(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    canary = {"event_id": "c-1", "app": "b", "output": "I can't help with that.",
              "attributes": {"evalstream.canary": "true", "evalstream.gold.refusal": "false"}}
    plain = {"event_id": "p-1", "app": "b", "output": "I can't help with that."}
    _, _, _, results = run_eval(tmp_path, capsys, [canary, plain], "--no-sampling")
    marked = {(r["event_id"], r["evaluator"]): (r["canary"], r["gold"]) for r in results}
    assert marked == {("c-1", "refusal"): (True, "false"), ("c-1", "sentiment"): (True, None),
                      ("p-1", "refusal"): (False, None), ("p-1", "sentiment"): (False, None)}


def test_the_sampled_out_warning_names_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ("routes:\n  - name: bot\n    sample_rate: 0.001\n"
              "    evaluators: [{evaluator: refusal, sample_rate: 0.5}]\n")
    rows = [{"event_id": f"e{i}", "output": "Sure."} for i in range(3)]
    code, _, err, results = run_eval(tmp_path, capsys, rows, config=config)
    assert (code, results) == (0, [])
    assert "3 of 3 items were sampled out" in err
    assert "Pass --no-sampling to score every routed item" in err
    # ... and the option does it.
    code, out, err, results = run_eval(tmp_path, capsys, rows, "--no-sampling", config=config)
    assert code == 0
    assert sorted(r["event_id"] for r in results) == ["e0", "e1", "e2"]
    assert "3 items, 0 without results" in out
    assert "warning" not in err


def test_with_no_sampling_a_rate_of_0_is_what_the_warning_blames(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ("routes:\n  - name: bot\n    sample_rate: 0.0\n"
              "    evaluators: [{evaluator: refusal}]\n")
    rows = [{"event_id": f"e{i}", "output": "Sure."} for i in range(3)]
    code, _, err, _ = run_eval(tmp_path, capsys, rows, "--no-sampling", config=config)
    assert code == 0
    assert "3 of 3 items were sampled out. With --no-sampling, only a rate of 0" in err
    assert "Pass --no-sampling" not in err


def test_without_sampling_changes_the_rates_and_nothing_else() -> None:
    settings = Settings.model_validate({
        "sampling": {"rate": 0.1, "salt": "s", "key": "event_id"},
        "judges": {"gpt": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                           "api_key": "sk-secret"}},
        "routes": [{"name": "r", "match": {"app": ["a"]}, "sample_rate": 0.25,
                    "strata": {"by": "tenant", "rates": {"t1": 0.5, "t2": 0.0}},
                    "evaluators": [{"evaluator": "refusal", "judge": "gpt", "sample_rate": 0.2,
                                    "version": "3", "params": {"source": "output"}}]},
                   {"name": "off", "sample_rate": 0.0,
                    "evaluators": [{"evaluator": "sentiment"}]}]})
    unsampled = without_sampling(settings)
    assert unsampled.sampling.rate == 1.0
    first, second = unsampled.routes
    assert first.sample_rate == 1.0
    assert first.strata is not None
    assert first.strata.rates == {"t1": 1.0, "t2": 0.0}  # off stays off
    assert first.evaluators[0].sample_rate == 1.0
    assert second.sample_rate == 0.0
    # Everything else as configured (the secret too, not its masked text).
    rates: dict[str, Any] = {
        "sampling": {"rate": True},
        "routes": {0: {"sample_rate": True, "strata": {"rates": True},
                       "evaluators": {0: {"sample_rate": True}}},
                   1: {"sample_rate": True}}}
    assert unsampled.model_dump(exclude=rates) == settings.model_dump(exclude=rates)
    assert unsampled.judges["gpt"].api_key is not None
    assert unsampled.judges["gpt"].api_key.get_secret_value() == "sk-secret"
    # A global rate of 0 turns everything off, as for canaries.
    off = Settings.model_validate({**settings.model_dump(), "sampling": {"rate": 0.0}})
    assert without_sampling(off).sampling.rate == 0.0


def test_json_summary_counts_with_and_without_the_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _, sampled_results = run_eval(tmp_path, capsys, traffic(), "--json")
    sampled = json.loads(out)
    _, out, _, _ = run_eval(tmp_path, capsys, traffic(), "--json", "--no-sampling")
    everything = json.loads(out)
    assert (sampled["no_sampling"], everything["no_sampling"]) == (False, True)
    assert sampled["items"] == everything["items"] == 4 * PER_APP

    def results(doc: dict[str, Any]) -> dict[str, int]:
        return {e["evaluator"]: sum(e["outcomes"].values()) for e in doc["evaluators"]}

    assert results(everything) == {"refusal": 2 * PER_APP, "sentiment": 2 * PER_APP}
    assert results(sampled) == Counter(r["evaluator"] for r in sampled_results)
    assert 0 < results(sampled)["refusal"] < results(sampled)["sentiment"] < 2 * PER_APP
    assert everything["without_results"] == 2 * PER_APP
    assert everything["skipped"] == {"no_route": PER_APP, "sampling": PER_APP}
    assert sampled["without_results"] > 2 * PER_APP
    assert sampled["skipped"]["sampling"] > PER_APP
    for e in everything["evaluators"]:  # the builtin judge asked every time, no errors
        assert e["errors"] == e["outcomes"]["error"] == 0
        assert e["judge"]["evaluations"] == 2 * PER_APP
