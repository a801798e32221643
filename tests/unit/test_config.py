"""Configuration: YAML + environment, validation that names the field, masked secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalstream.config import load_settings, masked_dump
from evalstream.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_valid() -> None:
    settings = load_settings(None)
    assert settings.routes[0].evaluators[0].evaluator == "refusal"
    assert settings.worker.max_in_flight > 0


def test_environment_overrides_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "kafka:\n  bootstrap_servers: file:1\n  group_id: g\n")
    monkeypatch.setenv("EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS", "env:2")
    settings = load_settings(path)
    assert settings.kafka.bootstrap_servers == "env:2"
    assert settings.kafka.group_id == "g"  # the rest of the section survives the override


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("kafka:\n  bootstrap_server: x\n", "kafka.bootstrap_server"),
        ("worker:\n  max_in_flight: lots\n", "worker.max_in_flight"),
        ("inputs: []\n", "inputs"),
        ("inputs:\n  - format: flat_json\n", "inputs.0.topic"),
        ("routes:\n  - name: r\n    sample_rate: 2\n    evaluators: [{evaluator: refusal}]\n",
         "routes.0.sample_rate"),
        ("kafka: [unclosed\n", "not valid YAML at line 2"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("results:\n  attributes: [model, model]\n", "results.attributes"),
    ],
)
def test_invalid_config_names_the_field(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert needle in str(info.value)


@pytest.mark.parametrize(("text", "needle"), [
    # Each loaded and ran: commits never came (offsets stayed put until a revoke or a
    # stop), the drain never gave up, the drift monitor never ticked, a judge's calls
    # never timed out, labels were kept for ever.
    ("worker: {commit_interval_s: .inf}\n", "worker.commit_interval_s"),
    ("worker: {shutdown_timeout_s: 1e999}\n", "worker.shutdown_timeout_s"),
    ("drift: {tick_s: .inf}\n", "drift.tick_s"),
    ("judges: {gpt: {type: openai, model: m, timeout_s: .inf}}\n", "judges.gpt.timeout_s"),
    ("labels: {retention_s: .inf}\n", "labels.retention_s"),
    ("judges: {gpt: {type: openai, model: m, price_input_per_1k: .nan}}\n",
     "judges.gpt.price_input_per_1k"),
])
def test_an_infinite_or_nan_number_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match="finite number") as info:
        load_settings(write(tmp_path, text))
    assert needle in str(info.value)


def test_an_infinite_number_from_the_environment_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSTREAM_WORKER__COMMIT_INTERVAL_S", "inf")
    with pytest.raises(ConfigError, match=r"worker\.commit_interval_s: .*finite number.*"
                                          r"EVALSTREAM_WORKER__COMMIT_INTERVAL_S"):
        load_settings(write(tmp_path, ""))


def test_unknown_judge_reference_names_route_and_evaluator(tmp_path: Path) -> None:
    text = "routes:\n  - name: support\n    evaluators: [{evaluator: refusal, judge: gpt}]\n"
    with pytest.raises(ConfigError, match=r"routes\[0\] \(support\) evaluators\[0\].*'gpt'"):
        load_settings(write(tmp_path, text))


def test_poll_interval_must_outlast_every_judge_deadline(tmp_path: Path) -> None:
    # Intake can wait a whole evaluation (up to three judge calls, each up to its deadline)
    # for a slot without fetching; aiokafka leaves the group when max_poll_interval_ms
    # passes without a fetch.
    judge = ("judges:\n  gpt: {type: openai, base_url: 'http://127.0.0.1:1/v1', model: m, "
             "deadline_s: 500}\n")
    with pytest.raises(ConfigError, match=r"kafka.max_poll_interval_ms \(1200000\) must "
                                          r"exceed 3 x judges.gpt.deadline_s \(1500 s\)"):
        load_settings(write(tmp_path, judge))
    settings = load_settings(write(tmp_path, judge + "kafka: {max_poll_interval_ms: 1600000}\n"))
    assert settings.kafka.max_poll_interval_ms == 1_600_000
    assert load_settings(None).kafka.max_poll_interval_ms > 3 * 300 * 1000  # default deadline


def test_a_cascades_steps_add_up_against_the_poll_interval(tmp_path: Path) -> None:
    # A cascade may escalate: one call is its first step's deadline plus its second's.
    judges = ("judges:\n"
              "  small: {type: openai, base_url: 'http://127.0.0.1:1/v1', model: s, "
              "deadline_s: 150}\n"
              "  large: {type: openai, base_url: 'http://127.0.0.1:1/v1', model: l, "
              "deadline_s: 300}\n"
              "  both: {type: cascade, first: small, then: large}\n")
    with pytest.raises(ConfigError, match=r"must exceed 3 x the deadline_s of judges.both's "
                                          r"steps added \(1350 s\)"):
        load_settings(write(tmp_path, judges))
    assert load_settings(write(tmp_path, judges + "kafka: {max_poll_interval_ms: 1400000}\n"))
    # Cascades that refer to each other are reported by name elsewhere, not looped on here.
    cycle = ("judges:\n  a: {type: cascade, first: builtin, then: b}\n"
             "  b: {type: cascade, first: builtin, then: a}\n")
    assert load_settings(write(tmp_path, cycle)).judges["a"].type == "cascade"


def test_empty_or_unreadable_api_key_file_fails_at_start_up(tmp_path: Path) -> None:
    key = tmp_path / "key"
    judge = ("judges:\n  gpt: {type: openai, base_url: 'http://127.0.0.1:1/v1', model: m, "
             f"api_key_file: '{key}'}}\n")
    key.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"judges.gpt.api_key_file: .* is empty"):
        load_settings(write(tmp_path, judge))
    key.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"judges.gpt.api_key_file: .*not UTF-8"):
        load_settings(write(tmp_path, judge))
    key.write_text("sk-test\n", encoding="utf-8")
    gpt = load_settings(write(tmp_path, judge)).judges["gpt"]
    key_value = getattr(gpt, "api_key", None)
    assert key_value is not None
    assert key_value.get_secret_value() == "sk-test"


def test_api_key_comes_from_env_and_is_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "sk-very-secret-123")
    text = (
        "judges:\n  gpt:\n    type: openai\n    base_url: http://127.0.0.1:1/v1\n"
        "    model: m\n    api_key_env: JUDGE_KEY_FOR_TEST\n"
    )
    settings = load_settings(write(tmp_path, text))
    judge = settings.judges["gpt"]
    assert judge.api_key is not None  # type: ignore[union-attr]
    assert judge.api_key.get_secret_value() == "sk-very-secret-123"  # type: ignore[union-attr]
    assert "sk-very-secret-123" not in str(masked_dump(settings))
    assert "sk-very-secret-123" not in repr(settings)


def test_missing_api_key_env_is_a_config_error(tmp_path: Path) -> None:
    text = (
        "judges:\n  gpt:\n    type: openai\n    base_url: http://x/v1\n    model: m\n"
        "    api_key_env: EVALSTREAM_TEST_SURELY_UNSET\n"
    )
    with pytest.raises(ConfigError, match=r"judges\.gpt\.api_key_env"):
        load_settings(write(tmp_path, text))


def test_an_empty_api_key_variable_is_named_as_such(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Set but empty (a Secret created before it was filled in) is refused like an unset
    # variable, and the message says it may be either.
    monkeypatch.setenv("JUDGE_KEY_FOR_TEST", "")
    text = ("judges:\n  gpt: {type: openai, base_url: 'http://x/v1', model: m, "
            "api_key_env: JUDGE_KEY_FOR_TEST}\n")
    with pytest.raises(ConfigError, match=r"judges\.gpt\.api_key_env: environment variable "
                                          r"JUDGE_KEY_FOR_TEST is not set or is empty"):
        load_settings(write(tmp_path, text))


def test_settings_are_frozen() -> None:
    settings = load_settings(None)
    with pytest.raises(Exception, match="frozen"):
        settings.worker.max_in_flight = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("judges:\n  c: {type: cascade, first: builtin, then: gpt}\n",
         r"judges\.c\.then: judge 'gpt' is not defined under `judges`"),
        ("judges:\n  c: {type: cascade, first: c, then: builtin}\n",
         r"judges\.c\.first: a cascade cannot refer to itself"),
        ("routes:\n  - {name: a, evaluators: [{evaluator: refusal}]}\n"
         "  - {name: b, evaluators: [{evaluator: refusal}]}\n"
         "  - {name: a, evaluators: [{evaluator: refusal}]}\n",
         r"routes: route name listed more than once: \['a'\]"),
        ("inputs: [{topic: t}, {topic: u}, {topic: t}]\n",
         r"inputs: topic listed more than once: \['t'\]"),
    ],
)
def test_cross_field_problems_name_the_field(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_settings(write(tmp_path, text))


def test_cross_field_checks_report_a_bad_judge_reference_first(tmp_path: Path) -> None:
    # Several problems at once: the judge reference is reported, as it always was.
    text = ("routes:\n  - {name: a, evaluators: [{evaluator: refusal, judge: gpt}]}\n"
            "  - {name: a, evaluators: [{evaluator: refusal}]}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert "'gpt' is not defined" in str(info.value)
    assert "listed more than once" not in str(info.value)


@pytest.mark.parametrize(("url", "endpoint"), [
    ("https://api.openai.com/v1/chat/completions", "/chat/completions"),
    ("https://user:pw@gw.example.com/v1/chat/completions/", "/chat/completions"),
    ("http://vllm:8000/v1/completions", "/completions"),
    ("http://llama:8080/completion", "/completion"),
])
def test_a_base_url_that_is_an_endpoint_url_is_refused(url: str, endpoint: str) -> None:
    # Was accepted: the judge adds the path itself, so every request went to
    # .../chat/completions/chat/completions and got a 404.
    with pytest.raises(ConfigError) as info:
        load_settings(None, judges={"gpt": {"type": "openai", "base_url": url, "model": "m"}})
    message = str(info.value)
    assert f"judges.gpt: Value error, base_url ends with the endpoint path " \
           f"'{endpoint}'" in message
    assert "pw" not in message


@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "http://llama:8080/",
                                 "https://r.openai.azure.com/openai/deployments/chat"])
def test_base_urls_load(url: str) -> None:
    judges = load_settings(None, judges={"j": {"type": "openai", "base_url": url,
                                               "model": "m"}}).judges
    assert judges["j"].base_url == url  # type: ignore[union-attr]
