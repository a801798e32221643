"""The configuration and metrics references cannot drift from the code.

``config/evalstream.example.yaml`` is the configuration reference (the README sends users
there): every setting the ``Settings`` models accept appears in it, set or as a commented
example, every key it shows (commented ones included, since users uncomment them) is a real
setting, and the values it sets are the defaults. The README's metrics table lists exactly
the metrics ``evalstream.metrics`` exports.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
import yaml
from prometheus_client import Counter, Gauge, Histogram, Info
from pydantic import BaseModel, TypeAdapter

from evalstream.config import (
    BuiltinJudgeConfig,
    CanarySettings,
    InputTopic,
    JudgeConfig,
    LabelSettings,
    LoggingSettings,
    ResultSettings,
    ServerSettings,
    Settings,
    WorkerSettings,
)
from evalstream.config.drift import DriftSettings
from evalstream.config.kafka import KafkaSettings
from evalstream.config.routes import SamplingSettings
from evalstream.config.topics import TopicSettings
from evalstream.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config" / "evalstream.example.yaml"
README = ROOT / "README.md"

#: Settings that must never be written in the file (loading refuses them): documented by
#: their dotted name in the example's header instead of as a key.
SECRETS = {"kafka.sasl_password": "kafka.sasl_password",
           "kafka.ssl_password": "kafka.ssl_password",
           "judges.openai.api_key": "judges.*.api_key"}

#: Settings shown as the alternative to another key, in that key's comment.
ALTERNATIVES = {"judges.openai.api_key_file": "# or api_key_file: "}

#: Keys of a commented example judge that name what the user must choose, not a default.
CHOSEN = {"type", "base_url", "model", "api_key_env", "api_key_file", "headers", "query",
          "first", "then"}

#: A commented key line: `  # key: value` inside a section, or `#  key: value` (two or more
#: spaces) at the margin, as the commented judges are written. Prose says `# Word: ...`.
_KEY = r"(?:- )?[A-Za-z_][\w-]*:(?:\s.*)?"
_INDENTED = re.compile(rf"(\s+)# (\s*{_KEY})")
_MARGIN = re.compile(rf"#(  +{_KEY})")


def _uncommented(text: str) -> str:
    """The example with its commented example keys uncommented (prose stays comments)."""
    lines = []
    for line in text.splitlines():
        if m := _INDENTED.fullmatch(line):
            line = m.group(1) + m.group(2)
        elif m := _MARGIN.fullmatch(line):
            line = m.group(1)
        lines.append(line)
    # `judges: {}` followed by (now uncommented) entries: the entries are its value.
    return re.sub(r"^(\S+:) (?:\{\}|\[\])[^\n]*\n(?=\s)", r"\1\n", "\n".join(lines), flags=re.M)


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds (through Optional, list, dict, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = get_origin(annotation)
    if origin is Annotated:
        return _models(get_args(annotation)[0])
    if origin in (list, dict, Union, types.UnionType):
        args = get_args(annotation)
        inner = args[1:] if origin is dict else args
        return [m for arg in inner for m in _models(arg)]
    return []


def _segment(name: str, model: type[BaseModel], several: bool) -> str:
    """A path segment; a judge model is named by its ``type`` (judges.openai.base_url)."""
    if several:
        return f"{name}.{model.model_fields['type'].default}"
    return name


def _setting_paths(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every setting's dotted path; lists and dicts of models are transparent."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        subs = _models(field.annotation)
        for sub in subs:
            if sub is BuiltinJudgeConfig:
                continue  # always there, nothing to set: `type: builtin` is all it has
            yield from _setting_paths(sub, f"{prefix}{_segment(name, sub, len(subs) > 1)}.")


def _shown_paths(model: type[BaseModel], value: Any, prefix: str = "") -> Iterator[str]:
    """The dotted paths of the keys in ``value`` (an example section), checked as it goes."""
    assert isinstance(value, dict), f"{prefix or 'the example'}: expected a mapping"
    for key, item in value.items():
        assert key in set(model.model_fields), f"the example shows {prefix}{key}: not a setting"
        path = f"{prefix}{key}"
        yield path
        subs = _models(model.model_fields[key].annotation)
        if not subs or item is None:
            continue
        annotation = model.model_fields[key].annotation
        if get_origin(annotation) is dict and len(subs) > 1:  # judges: by their type
            for entry in item.values():
                sub = next(s for s in subs if s.model_fields["type"].default == entry["type"])
                yield from _shown_paths(sub, entry, f"{prefix}{_segment(key, sub, True)}.")
        elif isinstance(item, list):
            for entry in item:
                yield from _shown_paths(subs[0], entry, f"{path}.")
        elif get_origin(annotation) is dict:
            for entry in item.values():
                yield from _shown_paths(subs[0], entry, f"{path}.")
        else:
            yield from _shown_paths(subs[0], item, f"{path}.")


def _example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(_uncommented(EXAMPLE.read_text("utf-8")))
    return data


def test_every_setting_is_in_the_example_config() -> None:
    shown = set(_shown_paths(Settings, _example()))
    text = EXAMPLE.read_text("utf-8")
    missing = []
    for path in _setting_paths(Settings):
        if path in SECRETS:
            assert SECRETS[path] in text, f"the example should say {SECRETS[path]} is refused"
        elif path in ALTERNATIVES:
            assert ALTERNATIVES[path] in text, f"{path} is not shown as an alternative"
        elif path not in shown:
            missing.append(path)
    assert not missing, f"settings missing from {EXAMPLE.name}: {missing}"


def test_the_uncommenting_sees_the_commented_examples() -> None:
    # Guards the test above: the commented judges, SASL/TLS keys and OTLP input are read.
    shown = set(_shown_paths(Settings, _example()))
    assert {"judges.openai.spend_cap_usd", "judges.cascade.min_confidence",
            "kafka.ssl_cafile", "inputs.attribute_map", "routes.match.topic"} <= shown
    assert _uncommented("  # Flat JSON: prose\n# Deterministic: prose") == (
        "  # Flat JSON: prose\n# Deterministic: prose")


def test_commented_examples_are_valid_settings() -> None:
    example = _example()
    judges = TypeAdapter(dict[str, JudgeConfig]).validate_python(example["judges"])
    assert {"gpt", "cheap-first", "azure", "local"} <= set(judges)
    for item in example["inputs"]:
        InputTopic.model_validate(item)


@pytest.mark.parametrize(("section", "model"), [
    ("kafka", KafkaSettings), ("topics", TopicSettings), ("sampling", SamplingSettings),
    ("worker", WorkerSettings), ("server", ServerSettings), ("drift", DriftSettings),
    ("results", ResultSettings), ("logging", LoggingSettings), ("canaries", CanarySettings),
    ("labels", LabelSettings),
])
def test_example_values_are_the_defaults(section: str, model: type[BaseModel]) -> None:
    # The file as shipped (nothing uncommented): a user reads its values as the defaults.
    shipped = yaml.safe_load(EXAMPLE.read_text("utf-8"))[section]
    default = model()
    wrong = {key: value for key, value in shipped.items()
             if model.model_validate({key: value}) != default}
    assert not wrong, f"{section}: the example shows non-default values {wrong}"


def test_example_judge_values_say_their_default() -> None:
    """A commented judge option shown with a value other than its default says the default."""
    defaults = {m.model_fields["type"].default: m for m in _models(JudgeConfig)}
    lines = EXAMPLE.read_text("utf-8").splitlines()
    judges = _example()["judges"]
    undocumented = []
    for name, judge in judges.items():
        model = defaults[judge["type"]]
        for key, value in judge.items():
            field = model.model_fields[key]
            if key in CHOSEN or field.is_required():
                continue
            if TypeAdapter(field.annotation).validate_python(value) == field.get_default(
                    call_default_factory=True):
                continue
            line = next(line for line in lines if re.match(rf"#\s+{key}:", line)
                        and str(value) in line.replace('"', ""))
            if "default" not in line:
                undocumented.append(f"judges.{name}.{key}")
    assert not undocumented, f"show the default next to: {undocumented}"


def _exported_metrics() -> set[str]:
    names = set()
    for collector in vars(Metrics()).values():
        if not isinstance(collector, Counter | Gauge | Histogram | Info):
            continue
        name = collector._name  # prometheus_client strips _total / _info from it
        if isinstance(collector, Counter):
            name += "_total"
        elif isinstance(collector, Info):
            name += "_info"
        names.add(name)
    return names


def _readme_metrics_table() -> dict[str, list[str]]:
    rows = re.findall(r"^\| `(evalstream_\w+)` \| (\w+) \|([^|]*)\|", README.read_text("utf-8"),
                      flags=re.M)
    return {name: [label.strip() for label in labels.split(",") if label.strip()]
            for name, _type, labels in rows}


def test_readme_lists_every_metric_with_its_labels() -> None:
    table = _readme_metrics_table()
    exported = _exported_metrics()
    assert set(table) == exported, (
        f"missing from the README: {sorted(exported - set(table))}; "
        f"not exported: {sorted(set(table) - exported)}")
    for collector in vars(Metrics()).values():
        if isinstance(collector, Counter | Gauge | Histogram):
            name = collector._name + ("_total" if isinstance(collector, Counter) else "")
            assert table[name] == list(collector._labelnames), name


def test_readme_names_only_exported_metrics() -> None:
    exported = _exported_metrics()
    samples = {f"{n}{s}" for n in exported for s in ("", "_bucket", "_sum", "_count")}
    for text in (README.read_text("utf-8"), EXAMPLE.read_text("utf-8")):
        for name in re.findall(r"\bevalstream_[a-z0-9_]+", text):
            assert name in samples, f"{name} is named in the docs but not exported"


def test_alerts_named_in_the_docs_exist() -> None:
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "rules.yaml").read_text("utf-8"))
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    docs = [README, ROOT / "helm" / "evalstream" / "README.md",
            ROOT / "helm" / "evalstream" / "values.yaml", ROOT / "docs" / "evaluation.md"]
    named = {name for path in docs
             for name in re.findall(r"\bEvalstream[A-Z]\w+", path.read_text("utf-8"))}
    assert named, "the docs name alerts"
    assert named <= alerts, sorted(named - alerts)


def test_readme_command_table_lists_every_command() -> None:
    import argparse

    from evalstream.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    table = set(re.findall(r"^\| `evalstream ([a-z-]+)", README.read_text("utf-8"), flags=re.M))
    assert table == set(sub.choices), (sorted(set(sub.choices) - table),
                                       sorted(table - set(sub.choices)))
