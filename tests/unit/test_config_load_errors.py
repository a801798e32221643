"""Bad input that used to escape as a traceback (exit 1) is a ConfigError naming its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import load_settings
from evalstream.errors import ConfigError


def test_non_utf8_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b'kafka:\n  client_id: "\xff\xfe"\n')
    with pytest.raises(ConfigError, match=r"latin1\.yaml is not UTF-8"):
        load_settings(path)


def test_non_string_top_level_key(tmp_path: Path) -> None:
    path = tmp_path / "intkey.yaml"
    path.write_text("1: foo\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"intkey\.yaml: top-level key 1"):
        load_settings(path)


@pytest.mark.parametrize("name", ["EVALSTREAM_KAFKA", "EVALSTREAM_KAFKA__EXTRA"])
def test_bad_json_in_environment_names_the_variable(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(name, "{bad")
    with pytest.raises(ConfigError, match=rf"environment.*{name}\b"):
        load_settings(None)


def test_these_exit_2_from_the_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"kafka:\n  client_id: \xff\n")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    good = tmp_path / "good.yaml"
    good.write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("EVALSTREAM_KAFKA", "{bad")
    assert main(["check-config", str(good)]) == EXIT_CONFIG
    assert "EVALSTREAM_KAFKA" in capsys.readouterr().err


#: YAML 1.1 (PyYAML) reads these unquoted as booleans.
_YAML_BOOLEANS = ["off", "on", "no", "yes"]


@pytest.mark.parametrize("word", _YAML_BOOLEANS)
def test_a_yaml_boolean_where_text_is_expected_says_to_quote_it(
        word: str, tmp_path: Path) -> None:
    # `name: off` arrived as False and the error said only "Input should be a valid string",
    # though the file plainly holds a string.
    path = tmp_path / "bool.yaml"
    path.write_text(f"routes:\n  - name: {word}\n    evaluators: [{{evaluator: refusal}}]\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"routes\.0\.name: .*valid string.*quote it"):
        load_settings(path)


def test_yaml_boolean_labels_of_a_classifier_say_to_quote_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Evaluator params are validated when the evaluators are built, not with Settings:
    # `labels: {yes: ..., no: ...}` gave "params.labels.1.[key]: Input should be a valid
    # string" with no word of YAML.
    path = tmp_path / "labels.yaml"
    path.write_text(
        "judges:\n  gpt: {type: openai, base_url: 'http://127.0.0.1:9', model: m}\n"
        "routes:\n  - name: r\n    evaluators:\n      - evaluator: classifier\n"
        "        judge: gpt\n        params: {labels: {yes: polite, no: rude}}\n",
        encoding="utf-8")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "params.labels" in err
    assert "quote it" in err


def test_a_number_where_text_is_expected_gets_no_yaml_boolean_hint(tmp_path: Path) -> None:
    # The hint is for booleans only: telling a user who wrote `name: 42` that YAML read a
    # yes/no word would send them looking for one.
    path = tmp_path / "number.yaml"
    path.write_text("routes:\n  - name: 42\n    evaluators: [{evaluator: refusal}]\n",
                    encoding="utf-8")
    with pytest.raises(ConfigError, match=r"routes\.0\.name: .*valid string") as info:
        load_settings(path)
    assert "quote it" not in str(info.value)


@pytest.mark.parametrize(("yaml_text", "where", "meant"), [
    ("kafka:\n  bootstrap_server: k:9092\n", r"kafka\.bootstrap_server", "bootstrap_servers"),
    ("kafak: {}\n", "kafak", "kafka"),
    ("routes:\n  - name: r\n    sesion: {}\n    evaluators: [{evaluator: refusal}]\n",
     r"routes\.0\.sesion", "session"),
    ("routes:\n  - name: r\n    evaluators: [{evaluator: refusal, sample_rat: 0.5}]\n",
     r"routes\.0\.evaluators\.0\.sample_rat", "sample_rate"),
    # An optional section (``SessionWindow | None``): the None member is no model to list
    # the settings of (checked: this case fails when any class counts as a model).
    ("routes:\n  - name: r\n    session: {max_event: 5}\n    evaluators: [{evaluator: refusal}]\n",
     r"routes\.0\.session\.max_event", "max_events"),
    # A judge's path is the file's, without pydantic's tag of the union of judge kinds
    # (judges.g.openai.dedline_s named a key no file or variable has).
    ("judges:\n  g: {type: openai, base_url: 'http://x', model: m, dedline_s: 3}\n",
     r"\n  judges\.g\.dedline_s", "deadline_s"),
    ("judges:\n  openai: {type: cascade, first: builtin, then: builtin, min_confdence: 1}\n",
     r"\n  judges\.openai\.min_confdence", "min_confidence"),
])
def test_a_misspelt_key_names_the_setting_it_is_closest_to(
        yaml_text: str, where: str, meant: str, tmp_path: Path) -> None:
    # "Extra inputs are not permitted" named the key but not the one meant.
    path = tmp_path / "typo.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{where}: .*not permitted \(did you mean {meant}\?\)"):
        load_settings(path)


def test_an_unknown_key_like_no_setting_gets_no_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "unknown.yaml"
    path.write_text("kafka:\n  zzz: 1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert "kafka.zzz: Extra inputs are not permitted" in str(info.value)
    assert "did you mean" not in str(info.value)


def test_a_misspelt_evaluator_param_names_the_param_it_is_closest_to(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "param.yaml"
    path.write_text("routes:\n  - name: r\n    evaluators:\n      - evaluator: refusal\n"
                    "        params: {treshold: 0.4}\n", encoding="utf-8")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    assert "params.treshold: Extra inputs are not permitted (did you mean threshold?)" in (
        capsys.readouterr().err)


def test_an_unknown_evaluator_param_like_none_lists_the_params(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A natural guess (allowed topics for topic_adherence's criteria) said only "Extra
    # inputs are not permitted": the params are in no config file to look up.
    path = tmp_path / "param.yaml"
    path.write_text("routes:\n  - name: r\n    evaluators:\n      - evaluator: topic_adherence\n"
                    "        params: {allowed_topics: [billing]}\n", encoding="utf-8")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    assert ("params.allowed_topics: Extra inputs are not permitted (known: criteria, "
            "criteria_attribute, include_conversation, max_chars, max_turns, threshold)") in (
        capsys.readouterr().err)


@pytest.mark.parametrize(("text", "key", "line"), [
    # A second section (a paste, a merge conflict resolved by keeping both) silently
    # replaced the first: here the refusal route was gone, with nothing said.
    ("routes:\n  - name: a\n    evaluators: [{evaluator: refusal}]\n"
     "routes:\n  - name: b\n    evaluators: [{evaluator: sentiment}]\n", "routes", 4),
    ("worker:\n  max_in_flight: 8\n  shutdown_timeout_s: 5\n  max_in_flight: 64\n",
     "max_in_flight", 4),
    ("judges: {gpt: {type: builtin}, gpt: {type: builtin}}\n", "gpt", 1),
])
def test_a_key_given_twice_in_one_mapping_is_refused(tmp_path: Path, text: str, key: str,
                                                     line: int) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"line {line}\b.*duplicate key '{key}'"):
        load_settings(path)
    assert main(["check-config", str(path)]) == EXIT_CONFIG


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    # ``<<: *anchor`` then a key of its own is how YAML overrides a merged value: no repeat.
    path = tmp_path / "merge.yaml"
    path.write_text("routes:\n  - &r {name: a, match: {app: [x]}, evaluators: [{evaluator: "
                    "refusal}]}\n  - {<<: *r, name: b, match: {app: [y]}}\n", encoding="utf-8")
    routes = load_settings(path).routes
    assert [(r.name, r.match.app) for r in routes] == [("a", ["x"]), ("b", ["y"])]
