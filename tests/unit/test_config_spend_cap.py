"""Judge spend caps in the configuration: bounds, the price it needs, the example file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import OpenAIJudgeConfig, load_settings
from evalstream.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "evalstream.example.yaml"
JUDGE = "judges:\n  gpt: {type: openai, base_url: 'http://llm:8000/v1', model: m, %s}\n"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_cap_by_default_and_a_day_window() -> None:
    config = OpenAIJudgeConfig(base_url="http://llm:8000/v1", model="m")
    assert config.spend_cap_usd is None
    assert config.spend_cap_window_s == 86_400
    assert config.on_spend_cap == "error"  # what the cap did before the option existed


def test_a_priced_cap_loads(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, JUDGE % (
        "price_output_per_1k: 0.002, spend_cap_usd: 5, spend_cap_window_s: 3600")))
    judge = settings.judges["gpt"]
    assert isinstance(judge, OpenAIJudgeConfig)
    assert (judge.spend_cap_usd, judge.spend_cap_window_s) == (5.0, 3600.0)


@pytest.mark.parametrize(("fields", "needle"), [
    # Both prices 0: every request costs 0, the cap could never be reached.
    ("spend_cap_usd: 5", r"judges\.gpt.*spend_cap_usd needs price_input_per_1k or "
                         r"price_output_per_1k above 0"),
    ("price_input_per_1k: 0.001, spend_cap_usd: 0", r"judges\.gpt\.spend_cap_usd"),
    ("price_input_per_1k: 0.001, spend_cap_usd: -1", r"judges\.gpt\.spend_cap_usd"),
    ("price_input_per_1k: 0.001, spend_cap_usd: 1, spend_cap_window_s: 59",
     r"judges\.gpt\.spend_cap_window_s"),
    ("price_input_per_1k: 0.001, spend_cap_usd: 1, on_spend_cap: skip",
     r"judges\.gpt\.on_spend_cap"),
    # Waiting needs a cap to wait at: without one the option would silently do nothing.
    ("on_spend_cap: wait", r"judges\.gpt.*on_spend_cap: wait needs spend_cap_usd"),
])
def test_bad_caps_are_config_errors_naming_the_field(tmp_path: Path, fields: str,
                                                     needle: str) -> None:
    path = write(tmp_path, JUDGE % fields)
    with pytest.raises(ConfigError, match=needle):
        load_settings(path)


def test_an_unpriced_cap_exits_2_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path, JUDGE % "spend_cap_usd: 5"))]) \
        == EXIT_CONFIG
    assert "spend_cap_usd" in capsys.readouterr().err


def test_the_examples_commented_judges_load_with_their_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The judge examples are comments (the example must run without an LLM): uncommented,
    # they must still be a valid configuration, cap included.
    text = EXAMPLE.read_text(encoding="utf-8")
    block = text.split("judges: {}\n", 1)[1].split("\n# ---", 1)[0]
    judges = "\n".join(re.sub(r"^#", "", line) for line in block.splitlines()
                       if line.startswith("#  "))
    loaded = yaml.safe_load("judges:\n" + judges)
    assert loaded["judges"]["azure"]["spend_cap_usd"] == 20
    monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
    monkeypatch.setenv("AZURE_OPENAI_KEY", "azure-example")
    settings = load_settings(write(tmp_path, yaml.safe_dump(loaded)))
    azure = settings.judges["azure"]
    assert isinstance(azure, OpenAIJudgeConfig)
    assert azure.spend_cap_usd == 20
    assert azure.spend_cap_window_s == 86_400
    assert azure.on_spend_cap == "error"


def test_a_waiting_cap_loads(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, JUDGE % (
        "price_output_per_1k: 0.002, spend_cap_usd: 5, on_spend_cap: wait")))
    judge = settings.judges["gpt"]
    assert isinstance(judge, OpenAIJudgeConfig)
    assert judge.on_spend_cap == "wait"
