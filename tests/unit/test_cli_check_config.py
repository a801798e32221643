"""``check-config`` prints each evaluator's params as validated: every default filled in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalstream.cli import EXIT_CONFIG, main
from evalstream.evaluators.topic_adherence import TopicAdherenceParams

_PLUGIN = """
from pydantic import SecretStr

from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.evaluators.registry import register


class VaultParams(EvaluatorParams):
    token: SecretStr
    retries: int = 3


@register
class Bare(Evaluator[EvaluatorParams]):
    name = "check_config_plugin_bare"
    summary = "test only: takes no params"

    async def evaluate(self, event):
        return Score(score=1.0, label=None, passed=True)


@register
class Vault(Evaluator[VaultParams]):
    name = "check_config_plugin_vault"
    summary = "test only: a secret param"
    params_model = VaultParams

    async def evaluate(self, event):
        return Score(score=1.0, label=None, passed=True)
"""


def check_config(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
                 ) -> tuple[int, object, str]:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["check-config", str(path)])
    captured = capsys.readouterr()
    return code, yaml.safe_load(captured.out) if code == 0 else None, captured.err


def evaluators_of(effective: object) -> list[dict[str, object]]:
    assert isinstance(effective, dict)
    (route,) = effective["routes"]
    evaluators: list[dict[str, object]] = route["evaluators"]
    return evaluators


def test_params_show_their_defaults(tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    # Was: params printed as written ({criteria: ...} only), though the example config
    # promises "every default filled in".
    code, effective, err = check_config(
        tmp_path, "routes:\n  - name: r\n    evaluators:\n"
                  "      - {evaluator: topic_adherence, params: {criteria: Billing questions}}\n",
        capsys)
    assert code == 0, err
    (spec,) = evaluators_of(effective)
    params = spec["params"]
    assert params == TopicAdherenceParams(criteria="Billing questions").model_dump(mode="json")
    assert isinstance(params, dict)
    assert params["criteria"] == "Billing questions"
    assert params["include_conversation"] is True
    assert params["criteria_attribute"] is None
    assert params["threshold"] == 0.5


def test_plugin_params_filled_with_secrets_masked_and_no_params_shown_empty(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "check_config_plugin.py").write_text(_PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    # From the environment: a param named like a credential is refused in the file.
    monkeypatch.setenv("EVALSTREAM_ROUTES", json.dumps([{"name": "r", "evaluators": [
        {"evaluator": "check_config_plugin_bare"},
        {"evaluator": "check_config_plugin_vault", "params": {"token": "vault-secret-42"}}]}]))
    code, effective, err = check_config(tmp_path, "plugins: [check_config_plugin]\n", capsys)
    assert code == 0, err
    bare, vault = evaluators_of(effective)
    assert bare["params"] == {}
    assert vault["params"] == {"token": "**********", "retries": 3}
    assert "vault-secret-42" not in yaml.safe_dump(effective)


@pytest.mark.parametrize(("params", "needle"), [
    ("{}", "criteria is required"),
    ("{criteria: Billing, threshold: 2}", "params.threshold"),
    ("{criteria: Billing, bogus: 1}", "params.bogus"),
])
def test_invalid_params_still_exit_2_naming_the_field(
        params: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check_config(
        tmp_path, "routes:\n  - name: r\n    evaluators:\n"
                  f"      - {{evaluator: topic_adherence, params: {params}}}\n", capsys)
    assert code == EXIT_CONFIG
    assert "routes[0] (r) evaluators[0]" in err
    assert needle in err, err
