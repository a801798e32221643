"""``load_settings``: a YAML file plus ``EVALSTREAM_`` environment overrides, validated.

Everything between the file and a ready ``Settings``: reading the YAML, refusing secrets
written in it, naming the environment variable behind a validation error, refusing
misspelled override sections, and filling judge API keys from their variable or file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import SecretStr, ValidationError
from pydantic_settings import SettingsError

from evalstream.config.hints import error_message
from evalstream.config.inline_secrets import refuse_inline_secrets
from evalstream.config.judges import (
    BuiltinJudgeConfig,
    CascadeJudgeConfig,
    OpenAIJudgeConfig,
    header_safe,
)
from evalstream.config.secret_files import read_secret_file
from evalstream.config.settings import Settings
from evalstream.errors import ConfigError

__all__ = ["format_validation_error", "load_settings"]


def _environment() -> dict[str, list[str]]:
    """EVALSTREAM_ variable name -> its lowercased path (``EVALSTREAM_A__B`` -> [a, b])."""
    return {name: name[len("EVALSTREAM_"):].lower().split("__") for name in os.environ
            if name.upper().startswith("EVALSTREAM_")}


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(part in it for part in short)


def _env_note(loc: list[str], env: dict[str, list[str]]) -> str:
    """Which environment variable a problem at ``loc`` came from, when one did.

    A variable's path must appear in order in ``loc`` (which may hold extra parts, such as
    a judge's ``type`` tag); a variable below ``loc`` (``loc`` is a whole section whose
    validator failed) is mentioned as also set.
    """
    if not loc:
        return ""
    sources = sorted((n for n, parts in env.items()
                      if parts[0] == loc[0] and _is_subsequence(parts, loc)),
                     key=lambda n: -len(env[n]))
    if sources:
        return f" (from environment variable {sources[0]})"
    below = sorted(n for n, parts in env.items() if parts[:len(loc)] == loc)
    if not below:
        return ""
    if loc[0] in ("routes", "inputs") and len(loc) == 1:
        return (f" (from {', '.join(below)}: list entries cannot be overridden one at a "
                f"time; set EVALSTREAM_{loc[0].upper()} to the whole list as JSON)")
    return f" (the environment also sets {', '.join(below)})"


#: The ``type`` tags pydantic puts in the path of a judge's error (``judges.g.openai.x``).
_JUDGE_TAGS = frozenset(m.model_fields["type"].default
                        for m in (BuiltinJudgeConfig, OpenAIJudgeConfig, CascadeJudgeConfig))


def _config_path(loc: list[str]) -> list[str]:
    """``loc`` as the user writes it: without the tag of the judge union, which is no key
    of the file (``judges.g.openai.timeout_s`` is ``judges.g.timeout_s`` in the YAML and
    ``EVALSTREAM_JUDGES__G__TIMEOUT_S`` in the environment)."""
    if len(loc) >= 3 and loc[0] == "judges" and loc[2] in _JUDGE_TAGS:
        return loc[:2] + loc[3:]
    return loc


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per problem, each naming the field path, e.g. ``routes.0.sample_rate``.

    A problem caused by an EVALSTREAM_ variable names that variable.

    Args:
        exc: What validating ``Settings`` raised.
        source: Where the configuration came from (the file's path, or "defaults").
    """
    env = _environment()
    lines = []
    from_env = False
    for err in exc.errors():
        path = _config_path([str(p) for p in err["loc"]])
        note = _env_note(path, env)
        from_env = from_env or bool(note)
        message = error_message(err, Settings)
        if err["type"] == "union_tag_not_found" and path[:1] == ["judges"]:
            # pydantic says "Unable to extract tag using discriminator 'type'": a judge
            # without its kind, typically one an EVALSTREAM_JUDGES__NAME__... variable
            # made up because NAME is in no file (or not lowercase there).
            message = f"no type given for this judge (one of {', '.join(sorted(_JUDGE_TAGS))})"
        lines.append(f"  {'.'.join(path) or '(top level)'}: {message}{note}")
    where = f"{source} and the environment" if from_env else source
    return "\n".join([f"invalid configuration in {where}:", *lines])


def _refuse_unknown_variables(settings: Settings) -> None:
    """A misspelled EVALSTREAM_ section (EVALSTREAM_WORKR__...) would otherwise do nothing.

    Only names with the nested delimiter ``__`` are checked: they can only be meant as
    overrides. Others are left alone, since the platform sets some: Kubernetes gives every
    pod EVALSTREAM_SERVICE_HOST, EVALSTREAM_PORT_9464_TCP... for a Service named
    ``evalstream``. Names a judge reads its key from (``api_key_env``) are exempt too.
    """
    key_vars = {j.api_key_env.upper() for j in settings.judges.values()
                if isinstance(j, OpenAIJudgeConfig) and j.api_key_env}
    sections = set(Settings.model_fields)
    unknown = sorted(name for name, parts in _environment().items()
                     if len(parts) > 1 and parts[0] not in sections
                     and name.upper() not in key_vars)
    if unknown:
        raise ConfigError(f"environment: {', '.join(unknown)} set no configuration section "
                          f"(EVALSTREAM_SECTION__FIELD, sections: {', '.join(sorted(sections))}"
                          f"); fix or unset {'them' if len(unknown) > 1 else 'it'}")


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping.

    YAML says a mapping's keys are unique; PyYAML keeps the last silently, so a second
    ``routes:`` (a paste, a merge resolved by keeping both) replaced the first, and the
    worker ran without those routes, saying nothing. Keys a merge (``<<: *anchor``) brings
    may still be overridden: that is how YAML overrides them.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: PyYAML's own check reports it
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark,
                    f"duplicate key {key!r} (first given at line {first.start_mark.line + 1})",
                    key_node.start_mark)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (invalid byte at offset "
                          f"{exc.start}); save it as UTF-8") from exc
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError as exc:
        # PyYAML composes nested collections recursively: a deeply nested document would
        # otherwise escape as a RecursionError traceback instead of exit code 2.
        raise ConfigError(f"config file {path} is nested too deeply to parse") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: the top level must be a mapping, "
                          f"not {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            # YAML allows `1: foo`; Settings(**data) would die with a TypeError instead.
            raise ConfigError(f"config file {path}: top-level key {key!r} is not a section "
                              f"name (keys must be strings)")
    _check_values(data, path)
    return data


def _printable(text: str) -> str:
    """``text`` safe to print: lone surrogates as ``\\udXXX`` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


#: More values than this, counted with YAML aliases expanded, is no configuration but an
#: alias bomb ("billion laughs"): pydantic-settings copies the expanded tree, for ever.
_MAX_VALUES = 100_000


def _check_values(data: dict[str, Any], source: Path) -> None:
    """Walk every value as expanded: refuse alias bombs and lone surrogates, naming them.

    A lone surrogate (a YAML ``"\\ud800"`` escape) is taken by no UTF-8 encoder: it would
    crash whatever encodes it later (the sampling salt's hash, a result's JSON, a header)
    instead of failing here with exit code 2.
    """
    stack: list[tuple[str, Any]] = [("", data)]
    seen = 0
    while stack:
        path, node = stack.pop()
        seen += 1
        if seen > _MAX_VALUES:
            raise ConfigError(f"config file {source}: more than {_MAX_VALUES} values once "
                              f"its aliases (*name) are expanded; write the values out")
        if isinstance(node, str):
            if _has_surrogate(node):
                raise ConfigError(f"{_printable(path) or '(top level)'}: the text holds a "
                                  f"lone surrogate (e.g. a \\ud800 escape), which is not "
                                  f"valid UTF-8")
        elif isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}" if path else str(key)
                stack.append((child, key))
                stack.append((child, value))
        elif isinstance(node, (list, tuple, set, frozenset)):
            stack.extend((f"{path}.{i}", value) for i, value in enumerate(node))


def _refuse_undecodable_variables() -> None:
    """An EVALSTREAM_ variable whose bytes are not UTF-8 reaches Python with lone
    surrogates in it (``surrogateescape``); refused, naming it, for the same reason."""
    for name, value in os.environ.items():
        if name.upper().startswith("EVALSTREAM_") and (
                _has_surrogate(name) or _has_surrogate(value)):
            raise ConfigError(f"environment: {_printable(name)} is not valid UTF-8 text")


def _env_names(field: str) -> list[str]:
    """The EVALSTREAM_ variables that feed ``field`` (names are case-insensitive)."""
    return sorted(n for n, parts in _environment().items() if parts[0] == field.lower())


def _sendable_key(key: str, where: str) -> str:
    """``key`` without surrounding whitespace, checked for what an HTTP header can carry.

    A key stored with a trailing newline (``kubectl create secret --from-file`` of a file
    that ends with one, exposed as a variable) would otherwise fail every request as a
    transport error, retried until each evaluation's deadline.

    Raises:
        ConfigError: naming ``where``, never echoing the key.
    """
    key = key.strip()
    if not header_safe(key):
        raise ConfigError(f"{where}: the key holds a line break, a control or a non-ASCII "
                          f"character, which an HTTP header cannot carry")
    return key


def _resolve_secrets(settings: Settings) -> Settings:
    """Fill judge API keys from their environment variable or file."""
    judges: dict[str, Any] = {}
    for name, judge in settings.judges.items():
        if isinstance(judge, OpenAIJudgeConfig):
            key: str | None = None
            where = f"judges.{name}.api_key"
            if judge.api_key is not None:
                key = judge.api_key.get_secret_value()
            elif judge.api_key_env:
                where = f"judges.{name}.api_key_env (environment variable {judge.api_key_env})"
                key = os.environ.get(judge.api_key_env)
                if not key or not key.strip():
                    raise ConfigError(f"judges.{name}.api_key_env: environment variable "
                                      f"{judge.api_key_env} is not set or is empty")
            elif judge.api_key_file:
                where = f"judges.{name}.api_key_file ({judge.api_key_file})"
                key = read_secret_file(judge.api_key_file, f"judges.{name}.api_key_file")
            if key:
                judge = judge.model_copy(update={"api_key": SecretStr(_sendable_key(key, where))})
        judges[name] = judge
    return settings.model_copy(update={"judges": judges})


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration.

    Args:
        path: The YAML file; None for the defaults.
        **overrides: Whole top-level sections that replace the file's. ``EVALSTREAM_``
            variables still win over them, as over the file.

    Raises:
        ConfigError: naming every bad field (and the variable behind it, when one is), an
            unreadable file, a secret written in the file, or an unknown override section.
    """
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(Path(path))
        refuse_inline_secrets(data, path)
    data.update(overrides)
    _refuse_undecodable_variables()
    source = str(path) if path is not None else "defaults"
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from exc
    except SettingsError as exc:
        # pydantic-settings could not parse an environment value (e.g. bad JSON in
        # EVALSTREAM_KAFKA); its message names the field but not the variable.
        match = re.search(r'field "([^"]+)"', str(exc))
        names = _env_names(match.group(1)) if match else []
        where = ", ".join(names) or "an EVALSTREAM_ environment variable"
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise ConfigError(f"invalid configuration in the environment: cannot parse "
                          f"{where}{cause}") from exc
    _refuse_unknown_variables(settings)
    settings.kafka.check_clients()
    return _resolve_secrets(settings)
