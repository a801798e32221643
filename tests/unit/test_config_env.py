"""EVALSTREAM_ overrides: misspelled sections are errors, env-caused errors say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import load_settings
from evalstream.errors import ConfigError


def test_misspelled_section_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSTREAM_WORKR__MAX_IN_FLIGHT", "7")
    with pytest.raises(ConfigError, match="EVALSTREAM_WORKR__MAX_IN_FLIGHT set no configuration"):
        load_settings(None)


def test_kubernetes_service_link_variables_are_not_overrides(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Kubernetes sets these in every pod for a Service named "evalstream" (the chart's
    # default release name); refusing them crash-looped every such deployment.
    for name, value in {"EVALSTREAM_SERVICE_HOST": "10.0.0.7", "EVALSTREAM_PORT":
                        "tcp://10.0.0.7:9464", "EVALSTREAM_PORT_9464_TCP_ADDR": "10.0.0.7",
                        "EVALSTREAM_SERVICE_PORT_METRICS": "9464"}.items():
        monkeypatch.setenv(name, value)
    assert load_settings(None).worker.max_in_flight > 0


def test_misspelled_variable_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("EVALSTREAM_WORKR__MAX_IN_FLIGHT", "7")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    assert main(["run", "--config", str(path)]) == EXIT_CONFIG
    assert "EVALSTREAM_WORKR__MAX_IN_FLIGHT" in capsys.readouterr().err


def test_a_judge_key_variable_may_start_with_the_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSTREAM_OPENAI_KEY", "sk-x")
    settings = load_settings(None, judges={"g": {"type": "openai", "base_url": "http://x",
                                                 "model": "m",
                                                 "api_key_env": "EVALSTREAM_OPENAI_KEY"}})
    assert settings.judges["g"].api_key is not None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("EVALSTREAM_WORKER__MAX_IN_FLIGHT", "-3",
         "worker.max_in_flight: Input should be greater than or equal to 1 "
         "(from environment variable EVALSTREAM_WORKER__MAX_IN_FLIGHT)"),
        ("EVALSTREAM_WORKER", '{"max_in_flight": 0}',
         "(from environment variable EVALSTREAM_WORKER)"),
        ("EVALSTREAM_JUDGES__G", '{"type": "openai", "base_url": "http://x", "model": "m", '
                                 '"timeout_s": -1}',
         "judges.g.timeout_s: Input should be greater than 0 (from environment"),
        ("EVALSTREAM_ROUTES__0__SAMPLE_RATE", "0.5",
         "list entries cannot be overridden one at a time"),
        # A judge in no file (a typo, or a name not in lowercase there): pydantic said
        # "Unable to extract tag using discriminator 'type'".
        ("EVALSTREAM_JUDGES__GTP__TIMEOUT_S", "5",
         "judges.gtp: no type given for this judge (one of builtin, cascade, openai) "
         "(the environment also sets EVALSTREAM_JUDGES__GTP__TIMEOUT_S)"),
        ("EVALSTREAM_KAFKA__SECURITY_PROTOCOL", "SASL_SSL",
         "the environment also sets EVALSTREAM_KAFKA__SECURITY_PROTOCOL"),
    ],
)
def test_errors_caused_by_the_environment_name_the_variable(
        name: str, value: str, needle: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("worker: {max_in_flight: 5}\n", encoding="utf-8")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert f"invalid configuration in {path} and the environment:" in str(info.value)
    assert needle in str(info.value)


def test_file_errors_do_not_blame_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("worker: {max_in_flight: 0}\n", encoding="utf-8")
    monkeypatch.setenv("EVALSTREAM_LOGGING__LEVEL", "DEBUG")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "environment" not in str(info.value)
