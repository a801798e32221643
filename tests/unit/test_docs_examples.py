"""The examples the README shows are what the program accepts and produces.

A newcomer copies them: every ``yaml`` block that is an evalstream config (and the config
``evalstream demo`` prints at its end) passes ``check-config`` without a warning, the
example result validates against the committed schema at the current ``schema_version``,
the canary is read as a canary with gold answers, a label message is read as a label, and
the ``kafka.max_request_size`` floor the docs quote is the one ``check-config`` enforces,
and ``eval --json`` gives exactly the keys docs/evaluation.md lists.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from evalstream.app.label_join import parse_label
from evalstream.cli import main
from evalstream.config import InputTopic, Settings
from evalstream.evaluators import registry
from evalstream.events import (
    CANARY_ATTRIBUTE,
    GOLD_ATTRIBUTE_PREFIX,
    SCHEMA_VERSION,
    EvalResult,
    RawRecord,
    dump_json,
)
from evalstream.formats.flat_json import make_decoder

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text("utf-8")
EXAMPLE = ROOT / "config" / "evalstream.example.yaml"
SCHEMA = ROOT / "schemas" / "eval_result.schema.json"


def blocks(lang: str) -> list[str]:
    """The README's fenced blocks of ``lang``, dedented (some sit in list items)."""
    found = re.findall(rf"^( *)```{lang}\n(.*?)^\1```", README, flags=re.M | re.S)
    return [textwrap.dedent(body) for _indent, body in found]


def json_examples() -> list[dict[str, Any]]:
    return [json.loads(block) for block in blocks("json")]


def check_config(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
                 ) -> tuple[int, str]:
    path = tmp_path / "snippet.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["check-config", str(path)])
    return code, capsys.readouterr().err


def test_readme_config_snippets_pass_check_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sections = set(Settings.model_fields)
    configs = []
    for block in blocks("yaml"):
        keys = set(yaml.safe_load(block))
        if keys & sections:  # an evalstream config; the others are Collector configs
            assert keys <= sections, f"a README config snippet has no {keys - sections}"
            configs.append(block)
    assert configs, "the README shows a config snippet (session windows)"
    for block in configs:
        code, err = check_config(tmp_path, block, capsys)
        assert (code, err) == (0, ""), f"{err}\nin the README snippet:\n{block}"


def test_the_config_the_demo_prints_passes_check_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from evalstream.app.demo import _REAL_SETUP

    snippet = textwrap.dedent(_REAL_SETUP.split("config file:\n", 1)[1].split("\nthen:")[0])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # api_key_env must name a set variable
    code, err = check_config(tmp_path, snippet, capsys)
    assert (code, err) == (0, ""), f"{err}\nin the demo's snippet:\n{snippet}"


def test_readme_result_example_validates_at_the_current_version() -> None:
    (result,) = [item for item in json_examples() if "schema_version" in item]
    schema = json.loads(SCHEMA.read_text("utf-8"))
    jsonschema.Draft202012Validator(schema).validate(result)
    assert set(result) == set(schema["properties"]), "the example shows every field"
    assert set(result["judge"]) == set(schema["$defs"]["JudgeInfo"]["properties"])
    assert result["schema_version"] == SCHEMA_VERSION
    EvalResult.model_validate(result)


def test_readme_canary_is_read_as_a_canary_with_gold_answers() -> None:
    (canary,) = [item for item in json_examples()
                 if CANARY_ATTRIBUTE in item.get("attributes", {})]
    decoder = make_decoder(InputTopic(topic="traces"))  # flat_json, no mapping
    (event,) = decoder(RawRecord("traces", 0, 0, dump_json(canary))).events
    assert event.attributes[CANARY_ATTRIBUTE] == "true"
    gold = {key.removeprefix(GOLD_ATTRIBUTE_PREFIX)
            for key in event.attributes if key.startswith(GOLD_ATTRIBUTE_PREFIX)}
    assert gold, "the example gives gold answers"
    assert gold <= set(registry.names()), gold


def test_readme_label_message_is_read_as_a_label() -> None:
    (message,) = [item for item in json_examples() if "gold" in item and "result_id" in item
                  and "schema_version" not in item]
    label = parse_label(dump_json(message))
    assert label is not None
    assert (label.result_id, label.gold) == (message["result_id"], message["gold"])


def test_the_documented_max_request_size_floor_is_the_enforced_one(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSTREAM_KAFKA__MAX_REQUEST_SIZE", "1024")
    assert main(["check-config", str(EXAMPLE)]) != 0
    floor = int(re.findall(r"must be at least (\d+) bytes", capsys.readouterr().err)[0])
    quoted = {
        "README": re.findall(r"largest such error result \(about (\d+) KB", README),
        EXAMPLE.name: re.findall(r"error result \(~(\d+) KB",
                                 EXAMPLE.read_text("utf-8")),
    }
    for where, numbers in quoted.items():
        assert len(numbers) == 1, f"{where}: the floor is quoted once"
        assert abs(int(numbers[0]) - floor / 1000) < 1.5, (
            f"{where} says ~{numbers[0]} KB; check-config enforces {floor} bytes")


def _documented_json_keys() -> tuple[set[str], set[str], set[str]]:
    """docs/evaluation.md's ``--json`` keys: top level, per evaluator, and of a spend."""
    text = (ROOT / "docs" / "evaluation.md").read_text("utf-8")
    section = text.split("### Machine-readable summary", 1)[1].split("A CI gate", 1)[0]
    cells = re.findall(r"^\| (`[^|]+`) \|", section, flags=re.M)
    keys = [key for cell in cells for key in re.findall(r"`([.\w\[\]]+)`", cell)]
    top = {key.removesuffix("[]") for key in keys if not key.startswith(".")}
    per_evaluator = {key[1:] for key in keys if key.startswith(".")}
    spend = re.search(r"A spend \(`\.judge`, `judge_total`\) is `\{([^}]*)\}`", section)
    assert spend is not None, "the spend's keys are listed"
    return top, per_evaluator, {key.strip() for key in spend.group(1).split(",")}


def test_the_json_summary_has_the_documented_keys(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "1", "evaluator": "refusal", "input": "Hi?",
                                 "output": "Hello! How can I help?", "label": True}) + "\n",
                     encoding="utf-8")
    assert main(["eval", "--input", str(items), "--no-progress", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    top, per_evaluator, spend = _documented_json_keys()
    (evaluator,) = summary["evaluators"]
    assert set(summary) == top
    assert set(evaluator) == per_evaluator
    assert set(evaluator["judge"]) == spend
    assert set(summary["judge_total"]) == spend | {"metered_tokens", "metered_cost_usd"}
