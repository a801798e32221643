"""Property: any configuration either starts or fails with a ``ConfigError`` naming a field.

Configs come from mutations of the example config, of a minimal one and of a rich one (LLM
and cascade judges, label evaluators, drift baselines): keys dropped, renamed or added,
values of every type put at every path (NaN, infinities, huge ints, empty strings and
lists, unicode, registry and judge names), list entries repeated (duplicate route names);
from YAML oddities (tags, anchors, deep nesting, several documents, BOM); and from
``EVALSTREAM_*`` overrides (bad JSON, wrong nesting, unknown sections).

Whatever ``load_settings`` accepts must also pass ``check_settings`` (what ``check-config``
runs), build the worker's whole composition (``Worker``: judges, evaluators, routing,
intake, drift monitor) and feed the drift engine without an exception; whatever it
refuses is a ``ConfigError`` whose message names a section. Secrets given through the
environment never appear in an error nor in ``check-config``'s output. Every crash found is
pinned as a plain test at the end.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from evalstream.app.checks import check_settings
from evalstream.app.worker import Worker
from evalstream.config import Settings, load_settings, masked_dump
from evalstream.drift import DriftEngine
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.events import EvalResult
from evalstream.judges.registry import close_judges
from tests.support.fuzz import FUZZ, paths, strict_json_values

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "config" / "evalstream.example.yaml").read_text("utf-8"))
SECTIONS = tuple(Settings.model_fields)

#: Markers searched for in every error and in check-config's output.
KAFKA_SECRET = "kafka-pw-Zq7Xw"
JUDGE_SECRET = "judge-key-Vb3Nm"
KEY_VAR = "FUZZ_JUDGE_KEY"

MINIMAL: dict[str, Any] = {"routes": [{"name": "r", "evaluators": [{"evaluator": "refusal"}]}]}
RICH: dict[str, Any] = {
    "kafka": {"bootstrap_servers": "kafka:9092", "max_poll_interval_ms": 600_000,
              "extra": {"isolation_level": "read_committed", "request_timeout_ms": 30000}},
    "inputs": [{"topic": "llm.traces", "mapping": {"output": "response.text"}},
               {"topic": "otlp", "format": "otlp_json", "attribute_map": {"tenant": "t.id"},
                "llm_operations": ["chat"]}],
    "topics": {"results": "res", "dead_letter": "dlq", "alerts": "alerts"},
    "sampling": {"key": "trace_id", "rate": 0.5, "salt": "s"},
    "routes": [
        {"name": "support", "sample_rate": 0.5,
         "match": {"app": ["bot"], "topic": ["llm.traces"], "requires": ["output"],
                   "attributes": {"env": ["prod", "staging"], "model": "*"}},
         "evaluators": [
             {"evaluator": "refusal", "reasons": "failures", "params": {"threshold": 0.5}},
             {"evaluator": "topic", "params": {"topics": {"orders": "order status"},
                                               "fail_topics": ["other"]}},
             {"evaluator": "topic_adherence", "judge": "gpt", "sample_rate": 0.2,
              "params": {"criteria": "Questions about our product."}},
             {"evaluator": "sentiment", "name": "sentiment_out", "judge": "cheap",
              "params": {"source": "output"}},
         ]},
        {"name": "default", "sample_rate": 0.1, "evaluators": [{"evaluator": "refusal"}]},
    ],
    "judges": {
        "gpt": {"type": "openai", "base_url": "https://api.example.com/v1", "model": "m",
                "api_key_env": KEY_VAR, "headers": {"X-Org": "o"}, "deadline_s": 60,
                "timeout_s": 30, "requests_per_s": 5},
        "cheap": {"type": "cascade", "first": "builtin", "then": "gpt", "min_confidence": 0.6},
    },
    "worker": {"max_in_flight": 16, "routing": "all"},
    "server": {"host": "127.0.0.1", "port": 0},
    "drift": {"windows_s": [60, 600], "bucket_s": 10, "baselines": {"support/refusal": 0.9},
              "watch_labels": {"topic": "other"}, "warmup_samples": 10},
    "results": {"attributes": ["model"]},
    "logging": {"level": "DEBUG", "format": "console"},
    "plugins": [],
}
BASES = {"example": EXAMPLE, "minimal": MINIMAL, "rich": RICH}
#: Each accepted example builds the worker twice (check-config's way and run's): half of
#: FUZZ's examples keeps this file within its time budget (EVALSTREAM_FUZZ_EXAMPLES scales it).
HALF = settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 2))

#: Values that have broken config loaders: odd numbers, empty and odd strings, names that
#: mean something elsewhere in the config (evaluators, judges, sections), bad patterns.
ODD_VALUES: tuple[Any, ...] = (
    math.nan, math.inf, -math.inf, 10**30, -(10**30), 2**63, -1, 0, 1, 0.5, 1e-9, 1e308,
    "", " ", "\x00", "é", "\u202e", "\U0001f600", "x" * 5000, [], {}, [[]], [{}], None, True,
    "[", "(?P<", "*", "**", "0x10", "1e999", "nan", "inf", "-1", "null", "builtin", "gpt",
    "cheap", "missing", "cascade", "openai", "support", "default", "kafka", "routes",
    *registry.names(),
)
# Copied: a drawn [] or {} is edited in place by later mutations, and must not change the
# constant for the next example (hypothesis would see a strategy that is not reproducible).
values = st.one_of(st.sampled_from(ODD_VALUES), strict_json_values).map(copy.deepcopy)
new_keys = st.one_of(st.sampled_from([
    "name", "type", "params", "judge", "api_key", "sasl_password", "evaluator", "first",
    "then", "extra", "zzz", "", "Name", "api_key_env", "api_key_file", "sasl_password_file",
    "ssl_cafile", "x" * 300]), st.text(max_size=8))


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_changes: int = 3) -> tuple[Any, list[tuple[Any, ...]]]:
    """``base`` with 1..``max_changes`` edits, and the paths edited."""
    doc = json.loads(json.dumps(base))
    edited: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, max_changes))):
        where = paths(doc)[1:]
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        action = draw(st.sampled_from(
            ["replace", "replace", "replace", "delete", "wrap", "rename", "add", "repeat"]))
        if action == "delete":
            del parent[key]
        elif action == "wrap":
            parent[key] = [parent[key]]
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(new_keys)] = parent.pop(key)
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][draw(new_keys)] = draw(values)
        elif action == "repeat" and isinstance(parent[key], list) and parent[key]:
            parent[key].append(json.loads(json.dumps(parent[key][0])))
        else:
            parent[key] = draw(values)
        edited.append(tuple(path))
    return doc, edited


@contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    """Only ``extra`` among the EVALSTREAM_ variables, plus the judge's key, then restored."""
    keep = {k: v for k, v in os.environ.items() if not k.upper().startswith("EVALSTREAM_")}
    with mock.patch.dict(os.environ, {**keep, KEY_VAR: JUDGE_SECRET, **extra}, clear=True):
        yield


def _feed_drift(settings: Settings) -> None:
    """A few results per configured evaluator: arms detectors with configured baselines."""
    engine = DriftEngine(settings.drift)
    for route in settings.routes:
        for spec in route.evaluators:
            for i in range(12):
                engine.observe(EvalResult.model_validate({
                    "result_id": "x", "event_id": "e", "trace_id": "t", "route": route.name,
                    "evaluator": spec.label, "passed": i % 3 != 0,
                    "label": ("other", "orders", "negative")[i % 3], "status": "ok",
                    "sample_rate": 1.0}), float(i))
    list(engine.pass_rates(12.0))
    engine.drain_alerts(12.0)
    engine.drain_alerts(1e7)


def _load(path: Path) -> Settings | ConfigError:
    """What start-up makes of ``path``: the built settings, or the ConfigError it exits on.

    Any other exception fails the test (it would be a traceback and exit code 1).
    """
    try:
        settings = load_settings(path)
        check_settings(settings)  # what check-config runs
    except ConfigError as exc:
        return exc
    # check-config said valid: run must build everything the same way, without any error.
    worker = Worker(settings, registry=CollectorRegistry())
    asyncio.run(close_judges(worker.judges))
    _feed_drift(settings)
    yaml.safe_dump(masked_dump(settings), allow_unicode=True)
    return settings


def _names_a_field(message: str) -> bool:
    """Whether ``message`` names where the problem is: a section (with the field path after
    it, in pydantic's ``a.0.b`` or the ``a[0] (name) b`` form), an environment variable,
    or, for a file that is not a YAML mapping at all, the line and column or the key."""
    if re.search(rf"\b({'|'.join(SECTIONS)})\b", message):
        return True
    if "EVALSTREAM_" in message:
        return True
    return bool(re.search(r"not valid YAML at line \d+|top level must be a mapping|"
                          r"top-level key|nested too deeply|not UTF-8|aliases", message))


def _check(path: Path) -> Settings | ConfigError:
    outcome = _load(path)
    if isinstance(outcome, ConfigError):
        message = str(outcome)
        assert _names_a_field(message), message
        assert KAFKA_SECRET not in message, message
        assert JUDGE_SECRET not in message, message
    else:
        shown = yaml.safe_dump(masked_dump(outcome), allow_unicode=True)
        assert KAFKA_SECRET not in shown
        assert JUDGE_SECRET not in shown
    return outcome


def _write(tmp: Path, doc: Any) -> Path:
    path = tmp / "fuzz.yaml"
    text = doc if isinstance(doc, (str, bytes)) else yaml.safe_dump(doc, allow_unicode=True)
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    path.write_bytes(text)
    return path


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_config")


@pytest.mark.parametrize("base", sorted(BASES))
def test_the_bases_are_valid(base: str, tmp: Path) -> None:
    with environment({"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET}):
        assert isinstance(_check(_write(tmp, BASES[base])), Settings)


@pytest.mark.parametrize("base", sorted(BASES))
@HALF
@given(data=st.data())
def test_mutated_configs_start_or_name_the_field(base: str, tmp: Path, data: st.DataObject) -> None:
    doc, edited = data.draw(mutated(BASES[base]))
    with environment({"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET}):
        outcome = _check(_write(tmp, doc))
    if isinstance(outcome, ConfigError) and len(edited) == 1 and len(edited[0]) > 1:
        # One edit inside a section: the message names that section (errors of checks
        # spanning sections name both, e.g. a judge's deadline_s and kafka's poll interval).
        assert re.search(rf"\b{re.escape(str(edited[0][0]))}\b", str(outcome)), (
            edited, str(outcome))


YAML_ODDITIES = [
    "kafka: !!python/object/apply:os.system [echo]\n",
    "kafka: !!python/name:os.system\n",
    "routes: !!binary aGVsbG8=\n",
    "sampling: {salt: !!binary /w==}\n",
    "sampling: {salt: 2020-01-01}\n",
    "results: {attributes: !!set {a, b}}\n",
    "x: &a {}\nkafka: *a\n",
    "kafka: &k {client_id: a}\ntopics: {<<: *k}\n",
    "kafka: &k {client_id: a}\nserver: *k\n",
    "- 1\n", "just text\n", "42\n", "null\n", "", "---\n", "~\n",
    "routes: []\n---\nkafka: {}\n",
    "? [a]\n: 1\n",
    "1: foo\n", "null: foo\n", "true: foo\n",
    "kafka: {1: a}\n", "judges: {1: {type: builtin}}\n", "drift: {baselines: {1: 0.5}}\n",
    "\ufeffkafka: {client_id: a}\n",
    "kafka: {client_id: a}\nkafka: {client_id: b}\n",
    "a: " + "[" * 1000 + "]" * 1000 + "\n",
    "kafka: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n",
    "routes: [{name: r, evaluators: [{evaluator: refusal, params: {a: "
    + "[" * 300 + "]" * 300 + "}}]}]\n",
    "sampling: {salt: \"\\ud800\"}\n",
    "routes: [{name: r, evaluators: [{evaluator: refusal, name: \"a\\udfff\"}]}]\n",
    "judges: {\"\\ud800\": {type: builtin}}\n",
    "drift: {arl0: .inf}\n", "drift: {arl0: .nan}\n", "drift: {min_shift: 1.0e-9}\n",
    "drift: {label_min_shift: 1.0e-9}\n", "sampling: {rate: .nan}\n",
    "worker: {max_in_flight: 100000000000000000000000000000000}\n",
    "server: {port: 1e999}\n",
]


@pytest.mark.parametrize("text", YAML_ODDITIES)
def test_yaml_oddities_start_or_name_the_field(text: str, tmp: Path) -> None:
    with environment({}):
        _check(_write(tmp, text))


FIELDS = sorted({str(p[1]) for p in paths(RICH) if len(p) > 1 and isinstance(p[1], str)}
                | {"api_key", "sasl_password", "0", "gpt", "cheap", "extra", "baselines"})
env_names = st.builds(
    lambda parts: "EVALSTREAM_" + "__".join(parts).upper(),
    st.lists(st.one_of(st.sampled_from([*SECTIONS, "workr", "kafka_", ""]),
                       st.sampled_from(FIELDS), st.text("abz_0", max_size=4)),
             min_size=1, max_size=4))
env_values = st.one_of(
    st.builds(json.dumps, strict_json_values),
    st.builds(lambda v: json.dumps(v), st.sampled_from(ODD_VALUES[:26])),
    st.sampled_from(["{bad", "[", "", " ", "nan", "inf", "1e999", "{}", "[]", "null", '"x"',
                     '[{"name": "r"}]', '{"type": "openai"}', '{"a": {"b": {"c": 1}}}']),
    st.text(max_size=10),
)


@HALF
@given(env=st.dictionaries(env_names, env_values, min_size=1, max_size=3))
def test_environment_overrides_start_or_name_the_variable(tmp: Path, env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if "\x00" not in k + v}  # not settable in a process
    with environment({"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET, **env}):
        _check(_write(tmp, RICH))


@pytest.mark.parametrize(("env", "expect"), [
    ({"EVALSTREAM_JUDGES__GPT__API_KEY": JUDGE_SECRET + "\n\x01"}, "judges.gpt.api_key"),
    ({"EVALSTREAM_KAFKA": json.dumps({"sasl_password": KAFKA_SECRET, "bad": 1})}, "kafka"),
    ({"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET,
      "EVALSTREAM_KAFKA__SECURITY_PROTOCOL": "SASL_PLAIN"}, "kafka.security_protocol"),
    ({"EVALSTREAM_JUDGES__GPT__BASE_URL": f"https://u:{JUDGE_SECRET}@[::1"}, "judges.gpt"),
    ({"EVALSTREAM_JUDGES__GPT": json.dumps({"api_key": JUDGE_SECRET, "bad": 1})},
     "judges.gpt"),
    ({"EVALSTREAM_KAFKA__EXTRA": json.dumps({"sasl_plain_password": KAFKA_SECRET, "x": 1})},
     "kafka.extra"),
    ({KEY_VAR: f"{JUDGE_SECRET}\u00e9"}, "judges.gpt.api_key_env"),
])
def test_secrets_never_appear_in_errors(tmp: Path, env: dict[str, str], expect: str) -> None:
    with environment(env):
        outcome = _check(_write(tmp, RICH))
    assert isinstance(outcome, ConfigError)
    assert expect in str(outcome)


# --- The real command line ---------------------------------------------------------------

@pytest.mark.parametrize(("text", "env", "expect"), [
    ("a: " + "[" * 1000 + "]" * 1000 + "\n", {}, "nested too deeply"),
    ('sampling: {salt: "\\ud800"}\n', {}, "sampling.salt"),
    ("routes: [{name: r, evaluators: [{evaluator: refusal, params: {threshold: x}}]}]\n",
     {"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET}, "params.threshold"),
    ("{}\n", {"EVALSTREAM_KAFKA": "{bad", "EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET},
     "EVALSTREAM_KAFKA"),
])
def test_check_config_exits_2_naming_the_field(
        tmp: Path, text: str, env: dict[str, str], expect: str) -> None:
    path = _write(tmp, text)
    with environment({**env, "PYTHONPATH": str(ROOT / "src")}):
        proc = subprocess.run([sys.executable, "-m", "evalstream", "check-config", str(path)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr
    assert "configuration error" in proc.stderr, proc.stderr
    assert expect in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    assert KAFKA_SECRET not in proc.stderr + proc.stdout


def test_check_config_masks_secrets_given_through_the_environment(tmp: Path) -> None:
    path = _write(tmp, RICH)
    env = {"EVALSTREAM_KAFKA__SASL_PASSWORD": KAFKA_SECRET,
           "EVALSTREAM_KAFKA__EXTRA": json.dumps({"sasl_plain_password": KAFKA_SECRET}),
           "PYTHONPATH": str(ROOT / "src")}
    with environment(env):
        proc = subprocess.run([sys.executable, "-m", "evalstream", "check-config", str(path)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert "valid" in proc.stdout
    assert KAFKA_SECRET not in proc.stdout + proc.stderr
    assert JUDGE_SECRET not in proc.stdout + proc.stderr


# --- Crashes found, pinned -----------------------------------------------------------------

def test_deeply_nested_yaml_is_a_config_error(tmp: Path) -> None:
    # Was a RecursionError from PyYAML's composer: a traceback, exit code 1.
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_settings(_write(tmp, "kafka: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n"))


def test_a_lone_surrogate_in_the_file_names_the_field(tmp: Path) -> None:
    # Was accepted, then crashed check-config and run with UnicodeEncodeError (the salt's
    # hash) or TypeError (orjson, a result id) once built.
    with pytest.raises(ConfigError, match=r"sampling\.salt: the text holds a lone surrogate"):
        load_settings(_write(tmp, 'sampling: {salt: "\\ud800"}\n'))
    with pytest.raises(ConfigError, match=r"routes\.0\.evaluators\.0\.name"):
        load_settings(_write(tmp, 'routes: [{name: r, evaluators: [{evaluator: refusal, '
                                  'name: "a\\udfff"}]}]\n'))
    with pytest.raises(ConfigError, match=r"judges\.\\ud800"):
        load_settings(_write(tmp, 'judges: {"\\ud800": {type: builtin}}\n'))


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(20)
def test_a_yaml_alias_bomb_is_refused_quickly(tmp: Path) -> None:
    # 9**10 values once expanded: pydantic-settings' copy of the init values never ended.
    with pytest.raises(ConfigError, match=r"more than 100000 values once its aliases"):
        load_settings(_write(tmp, _alias_bomb(10)))
    # Aliases as configs use them are fine.
    settings = load_settings(_write(tmp, "kafka: {client_id: &id worker-a, group_id: *id}\n"))
    assert settings.kafka.group_id == "worker-a"


def test_a_variable_that_is_not_utf8_names_the_variable(tmp: Path) -> None:
    # A non-UTF-8 byte in a variable reaches Python as a lone surrogate (surrogateescape).
    salt = b"\xff".decode("utf-8", "surrogateescape")
    with (environment({"EVALSTREAM_SAMPLING__SALT": salt}),
          pytest.raises(ConfigError, match="EVALSTREAM_SAMPLING__SALT is not valid UTF-8")):
        load_settings(_write(tmp, MINIMAL))


@pytest.mark.parametrize(("text", "field"), [
    ("drift: {arl0: .inf}\n", "drift.arl0"),  # OverflowError when a detector is armed
    ("drift: {arl0: 1.0e+30}\n", "drift.arl0"),  # the design's search never ended
    ("drift: {min_shift: 1.0e-9}\n", "drift.min_shift"),  # ZeroDivisionError when armed
    ("drift: {label_min_shift: 1.0e-9}\n", "drift.label_min_shift"),
])
def test_drift_tuning_that_crashed_the_detector_is_refused(
        tmp: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(field)):
        load_settings(_write(tmp, text))


@pytest.mark.parametrize(("extra", "client"), [
    ({"retry_backoff_ms": "x"}, "consumer"), ({"request_timeout_ms": "abc"}, "producer")])
def test_kafka_options_aiokafka_refuses_are_config_errors(
        tmp: Path, extra: dict[str, Any], client: str) -> None:
    # Were accepted by check-config, then `run` ended with a ValueError/TypeError traceback
    # (exit 1) when the sink built its producer.
    with environment({}):
        settings = load_settings(_write(tmp, {"kafka": {"extra": extra}}))
        with pytest.raises(ConfigError, match=rf"kafka\.extra .*aiokafka {client} refuses"):
            check_settings(settings)


def test_run_exits_2_on_a_kafka_option_aiokafka_refuses(tmp: Path) -> None:
    # The broker is never reached: the check comes before anything connects.
    path = _write(tmp, {"kafka": {"extra": {"request_timeout_ms": "abc"}, "connect_timeout_s": 0,
                                  "bootstrap_servers": "127.0.0.1:1"}})
    with environment({"PYTHONPATH": str(ROOT / "src")}):
        proc = subprocess.run([sys.executable, "-m", "evalstream", "run", "--config", str(path)],
                              capture_output=True, text=True, timeout=60, check=False,
                              env=dict(os.environ))
    assert proc.returncode == 2, proc.stderr
    assert "kafka.extra" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("field", ["session_timeout_ms", "max_poll_interval_ms",
                                   "fetch_max_bytes", "max_partition_fetch_bytes",
                                   "max_request_size", "prefetch_bytes"])
def test_kafka_sizes_and_timeouts_fit_the_protocols_int32(tmp: Path, field: str) -> None:
    # 2**31 was accepted; against a real broker every poll then failed with "Unexpected
    # error during coordination" (aiokafka cannot encode it as INT32): a worker that
    # runs but never consumes.
    with pytest.raises(ConfigError, match=rf"kafka\.{field}: Input should be less than"):
        load_settings(_write(tmp, {"kafka": {field: 2**31}}))
    assert getattr(load_settings(_write(tmp, {"kafka": {field: 2**31 - 1}})).kafka,
                   field) == 2**31 - 1
