"""Topic names are checked against Kafka's own rule at load, naming the field and the rule.

Before, ``llm traces`` or a 300-character name passed check-config and failed only once the
worker ran, as an obscure broker error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalstream.cli import EXIT_CONFIG
from evalstream.config import InputTopic, Settings, TopicSettings, load_settings
from evalstream.errors import ConfigError

RULE = "1 to 249 characters of a-z, A-Z, 0-9, '.', '_' and '-', and not '.' or '..'"

INVALID = {
    "a space": ("llm traces", "'llm traces' holds ' '"),
    "a slash and a colon": ("a/b:c", "'a/b:c' holds '/', ':'"),
    "non-ASCII": ("tracés", "holds 'é'"),
    "a trailing newline": ("llm.traces\n", "holds '\\n'"),
    "empty": ("", "it is empty"),
    "dot": (".", "it is '.'"),
    "dot dot": ("..", "it is '..'"),
    "too long": ("t" * 250, "it is 250 characters long"),
}

VALID = ["llm.traces", "a", "A-Z_0.9", "...", "t" * 249, "_confluent-metrics"]


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_input_topic_is_refused_with_the_rule(case: str) -> None:
    name, says = INVALID[case]
    with pytest.raises(ValidationError) as info:
        InputTopic(topic=name)
    message = str(info.value)
    assert says in message
    assert RULE in message


@pytest.mark.parametrize("field", ["results", "dead_letter", "alerts"])
@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_output_topic_names_its_field(field: str, case: str) -> None:
    name, says = INVALID[case]
    with pytest.raises(ConfigError) as info:
        load_settings(None, topics={field: name})
    assert f"topics.{field}: " in str(info.value)
    assert says in str(info.value)


@pytest.mark.parametrize("name", VALID)
def test_names_kafka_accepts_load(name: str) -> None:
    assert load_settings(None, inputs=[{"topic": name}]).inputs[0].topic == name
    assert load_settings(None, inputs=[{"topic": "in"}],
                         topics={"alerts": name}).topics.alerts == name


def test_the_second_input_is_named_by_its_index() -> None:
    with pytest.raises(ConfigError, match=r"inputs\.1\.topic: .*'bad topic' holds ' '"):
        load_settings(None, inputs=[{"topic": "ok"}, {"topic": "bad topic"}])


def test_the_defaults_are_valid_names() -> None:
    settings = Settings()
    assert settings.inputs[0].topic == "llm.traces"
    assert TopicSettings().model_dump() == {
        "results": "evalstream.results", "dead_letter": "evalstream.dlq",
        "alerts": "evalstream.alerts", "otel_results": "", "otel_encoding": "otlp_proto"}


@pytest.mark.parametrize(("command", "yaml_text", "field"), [
    ("check-config", "inputs:\n  - topic: llm traces\n", "inputs.0.topic"),
    ("run", "inputs:\n  - topic: llm traces\n", "inputs.0.topic"),
    ("check-config", f"topics:\n  results: {'r' * 300}\n", "topics.results"),
    ("run", f"topics:\n  results: {'r' * 300}\n", "topics.results"),
])
def test_the_command_line_exits_2_naming_the_field_and_the_rule(
        command: str, yaml_text: str, field: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    # An unreachable broker with no wait: if validation let the name through, `run` would
    # fail to connect and exit 1, not 2.
    path.write_text("kafka: {bootstrap_servers: '127.0.0.1:1', connect_timeout_s: 0}\n"
                    + yaml_text, encoding="utf-8")
    argv = ["run", "--config", str(path)] if command == "run" else ["check-config", str(path)]
    proc = subprocess.run([sys.executable, "-m", "evalstream", *argv], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert f"{field}: Value error, not a valid Kafka topic name" in proc.stderr
    assert RULE in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("field", ["results", "dead_letter", "alerts"])
def test_an_output_topic_that_is_also_an_input_is_refused(field: str) -> None:
    # Was accepted: with dead_letter = the input, one malformed message was read back,
    # dead-lettered again, and so on for ever (25 copies after 10 s on the test broker).
    with pytest.raises(ConfigError) as info:
        load_settings(None, inputs=[{"topic": "a"}, {"topic": "b"}], topics={field: "b"})
    assert f"topics.{field}: 'b' is also an input topic" in str(info.value)
    assert "consume its own output" in str(info.value)


def test_check_config_exits_2_on_an_output_topic_that_is_an_input(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("inputs: [{topic: llm.traces}]\ntopics: {dead_letter: llm.traces}\n",
                    encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "evalstream", "check-config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "topics.dead_letter: 'llm.traces' is also an input topic" in proc.stderr


@pytest.mark.parametrize(("entry", "says"), [
    ({"topic": "spans", "format": "otlp_proto", "mapping": {"output": "response.text"}},
     "inputs.0: Value error, mapping: for flat_json inputs only; this otlp_proto input"),
    ({"topic": "t", "attribute_map": {"tenant": "app.tenant"}, "app_attribute": "app.name"},
     "inputs.0: Value error, app_attribute, attribute_map: for OTLP inputs only (otlp_proto"),
    ({"topic": "t", "format": "flat_json", "llm_operations": ["chat"]},
     "llm_operations: for OTLP inputs only (otlp_proto, otlp_json, otlp_logs_proto, "
     "otlp_logs_json)"),
])
def test_an_option_of_another_format_is_refused(entry: dict[str, object], says: str) -> None:
    # Was accepted and ignored by the decoder: e.g. an OTLP input's events lacked the
    # fields a `mapping` was meant to fill.
    with pytest.raises(ConfigError) as info:
        load_settings(None, inputs=[entry])
    assert says in str(info.value)


def test_each_format_keeps_its_own_options() -> None:
    settings = load_settings(None, inputs=[
        {"topic": "flat", "mapping": {"output": "response.text"}},
        {"topic": "spans", "format": "otlp_json", "attribute_map": {"tenant": "app.tenant"},
         "session_attribute": "session.id", "app_attribute": "app.name",
         "llm_operations": ["chat"]}])
    assert [i.format for i in settings.inputs] == ["flat_json", "otlp_json"]


def test_check_configs_effective_output_loads_again(tmp_path: Path) -> None:
    # The dump holds every default (llm_operations of a flat_json input too).
    example = Path(__file__).resolve().parents[2] / "config" / "evalstream.example.yaml"
    proc = subprocess.run([sys.executable, "-m", "evalstream", "check-config", str(example)],
                          capture_output=True, text=True, timeout=60, check=True)
    effective = tmp_path / "effective.yaml"
    effective.write_text(proc.stdout, encoding="utf-8")
    assert load_settings(effective).inputs == load_settings(example).inputs
