"""The one frozen settings object: a YAML file plus ``EVALSTREAM_`` environment overrides.

Environment variables use ``__`` between levels (``EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS``)
and win over the file. Secrets (judge API keys, the SASL password) come only from the
environment or from files and are held as ``SecretStr``. This package is the only code
that reads ``os.environ``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from evalstream.config.drift import DriftSettings
from evalstream.config.judges import (
    MASK,
    BuiltinJudgeConfig,
    CascadeJudgeConfig,
    JudgeConfig,
    OpenAIJudgeConfig,
    redact_url,
)
from evalstream.config.kafka import InputTopic, KafkaSettings, TopicSettings
from evalstream.config.routes import EvaluatorSpec, MatchRule, Route, SamplingSettings
from evalstream.config.secret_files import read_secret_file
from evalstream.errors import ConfigError

__all__ = [
    "BuiltinJudgeConfig",
    "CascadeJudgeConfig",
    "DriftSettings",
    "EvaluatorSpec",
    "InputTopic",
    "JudgeConfig",
    "KafkaSettings",
    "LoggingSettings",
    "MatchRule",
    "OpenAIJudgeConfig",
    "ResultSettings",
    "Route",
    "SamplingSettings",
    "ServerSettings",
    "Settings",
    "TopicSettings",
    "WorkerSettings",
    "format_validation_error",
    "load_settings",
    "masked_dump",
]

#: The most judge calls one evaluation makes one after another (role_violation: role,
#: verdict, sections); bounds how long intake can wait for a slot.
_JUDGE_CALLS_IN_A_ROW = 3


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WorkerSettings(_Section):
    """Limits of the worker loop."""

    #: Evaluations (event x evaluator) in flight before the consumer pauses its partitions.
    max_in_flight: int = Field(default=256, ge=1)
    #: On SIGTERM: how long to drain in-flight work before giving up on it (uncommitted).
    shutdown_timeout_s: float = Field(default=25.0, gt=0)
    #: How often completed offsets are committed.
    commit_interval_s: float = Field(default=1.0, gt=0)
    #: "first": the first matching route only; "all": every matching route.
    routing: Literal["first", "all"] = "first"
    #: Messages with a larger value are dead-lettered (reason ``too_large``) undecoded.
    max_message_bytes: int = Field(default=1_048_576, ge=1)


class ResultSettings(_Section):
    """What every result carries beyond the score."""

    #: Event attributes copied into each result's ``attributes`` (e.g. ``model``,
    #: ``environment``, ``user_tier``), so results can be sliced by them downstream.
    #: Opt-in, by name: attribute values can be user data. Never metric labels (unbounded).
    #: Each value is clipped to 256 characters.
    attributes: list[str] = Field(default_factory=list, max_length=32)

    @field_validator("attributes")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        if any(not n.strip() for n in names) or len(set(names)) != len(names):
            raise ValueError("attribute names must be non-empty and listed once")
        return names


class ServerSettings(_Section):
    """The HTTP server for /metrics, /healthz and /readyz."""

    host: str = "0.0.0.0"  # noqa: S104 - a pod serves probes and scrapes on its IP
    port: int = Field(default=9464, ge=0, le=65535)


class LoggingSettings(_Section):
    """Logs: JSON in production; trace content never logged unless asked for."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    format: Literal["json", "console"] = "json"
    #: Include inputs/outputs in debug logs. Off by default: traces hold user data.
    log_content: bool = False


def _default_routes() -> list[Route]:
    return [Route(name="default", evaluators=[EvaluatorSpec(evaluator="refusal")])]


class Settings(BaseSettings):
    """The whole configuration; built once at start-up and passed down, never mutated."""

    model_config = SettingsConfigDict(
        frozen=True,
        extra="forbid",
        env_prefix="EVALSTREAM_",
        env_nested_delimiter="__",
        nested_model_default_partial_update=True,
    )

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    inputs: list[InputTopic] = Field(
        default_factory=lambda: [InputTopic(topic="llm.traces")], min_length=1
    )
    topics: TopicSettings = Field(default_factory=TopicSettings)
    sampling: SamplingSettings = Field(default_factory=SamplingSettings)
    routes: list[Route] = Field(default_factory=_default_routes, min_length=1)
    judges: dict[str, JudgeConfig] = Field(default_factory=dict)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    drift: DriftSettings = Field(default_factory=DriftSettings)
    results: ResultSettings = Field(default_factory=ResultSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    #: Python modules imported at start-up, before evaluators are built, so that they can
    #: register user-defined evaluators (``@evalstream.evaluators.register``).
    plugins: list[str] = Field(default_factory=list)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The YAML arrives as init kwargs; listing env first makes the environment win.
        return env_settings, init_settings

    @model_validator(mode="after")
    def _judge_references_resolve(self) -> Settings:
        judges = {"builtin", *self.judges}
        for ri, route in enumerate(self.routes):
            for ei, spec in enumerate(route.evaluators):
                if spec.judge not in judges:
                    raise ValueError(
                        f"routes[{ri}] ({route.name}) evaluators[{ei}] ({spec.label}): judge "
                        f"{spec.judge!r} is not defined under `judges` (known: {sorted(judges)})"
                    )
        for name, judge in self.judges.items():
            if not isinstance(judge, CascadeJudgeConfig):
                continue
            for step, ref in (("first", judge.first), ("then", judge.then)):
                if ref == name:
                    raise ValueError(f"judges.{name}.{step}: a cascade cannot refer to itself")
                if ref not in judges:
                    raise ValueError(f"judges.{name}.{step}: judge {ref!r} is not defined under "
                                     f"`judges` (known: {sorted(judges)})")
        return self

    @model_validator(mode="after")
    def _poll_interval_outlasts_judge_calls(self) -> Settings:
        for name, judge in self.judges.items():
            if not isinstance(judge, OpenAIJudgeConfig):
                # The builtin judge answers at once; a cascade's steps are judges of their own.
                continue
            longest = judge.deadline_s * _JUDGE_CALLS_IN_A_ROW
            if longest * 1000 >= self.kafka.max_poll_interval_ms:
                raise ValueError(
                    f"kafka.max_poll_interval_ms ({self.kafka.max_poll_interval_ms}) must exceed "
                    f"{_JUDGE_CALLS_IN_A_ROW} x judges.{name}.deadline_s ({longest:g} s): an "
                    f"evaluation makes up to {_JUDGE_CALLS_IN_A_ROW} judge calls in a row, "
                    f"intake can wait that long for a free slot, and a consumer that does "
                    f"not poll leaves its group")
        return self

    @model_validator(mode="after")
    def _names_listed_once(self) -> Settings:
        for field, what, names in (("routes", "route name", [r.name for r in self.routes]),
                                   ("inputs", "topic", [i.topic for i in self.inputs])):
            repeated = sorted(n for n, count in Counter(names).items() if count > 1)
            if repeated:
                raise ValueError(f"{field}: {what} listed more than once: {repeated}")
        return self


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


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per problem, each naming the field path, e.g. ``routes.0.sample_rate``.

    A problem caused by an EVALSTREAM_ variable names that variable.
    """
    env = _environment()
    lines = []
    from_env = False
    for err in exc.errors():
        path = [str(p) for p in err["loc"]]
        note = _env_note(path, env)
        from_env = from_env or bool(note)
        lines.append(f"  {'.'.join(path) or '(top level)'}: {err['msg']}{note}")
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


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (invalid byte at offset "
                          f"{exc.start}); save it as UTF-8") from exc
    try:
        data = yaml.safe_load(text)
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
    return data


def _refuse_inline_secrets(data: dict[str, Any], path: Path | str) -> None:
    """Secrets come from the environment or files only: a config file is not a secret store.

    Checked on the file's own data, before the environment is merged, so the same fields
    set through EVALSTREAM_ variables stay accepted.
    """
    found: list[str] = []
    kafka = data.get("kafka")
    if isinstance(kafka, dict):
        if kafka.get("sasl_password") is not None:
            found.append("kafka.sasl_password: set EVALSTREAM_KAFKA__SASL_PASSWORD or "
                         "kafka.sasl_password_file instead")
        extra = kafka.get("extra")
        if isinstance(extra, dict) and extra.get("sasl_plain_password") is not None:
            found.append("kafka.extra.sasl_plain_password: set "
                         "EVALSTREAM_KAFKA__SASL_PASSWORD or kafka.sasl_password_file instead")
    judges = data.get("judges")
    if isinstance(judges, dict):
        for name, judge in judges.items():
            if isinstance(judge, dict) and judge.get("api_key") is not None:
                found.append(f"judges.{name}.api_key: set judges.{name}.api_key_env (the name "
                             f"of an environment variable) or api_key_file instead")
    if found:
        raise ConfigError(f"secrets must not be written in the config file {path} (it ends up "
                          f"in ConfigMaps, repositories and logs):\n  " + "\n  ".join(found))


def _env_names(field: str) -> list[str]:
    """The EVALSTREAM_ variables that feed ``field`` (names are case-insensitive)."""
    return sorted(n for n, parts in _environment().items() if parts[0] == field.lower())


def _resolve_secrets(settings: Settings) -> Settings:
    """Fill judge API keys from their environment variable or file."""
    judges: dict[str, Any] = {}
    for name, judge in settings.judges.items():
        if isinstance(judge, OpenAIJudgeConfig) and judge.api_key is None:
            key: str | None = None
            if judge.api_key_env:
                key = os.environ.get(judge.api_key_env)
                if not key:
                    raise ConfigError(f"judges.{name}.api_key_env: environment variable "
                                      f"{judge.api_key_env} is not set")
            elif judge.api_key_file:
                key = read_secret_file(judge.api_key_file, f"judges.{name}.api_key_file")
            if key:
                judge = judge.model_copy(update={"api_key": SecretStr(key)})
        judges[name] = judge
    return settings.model_copy(update={"judges": judges})


def load_settings(path: Path | str | None = None, **overrides: Any) -> Settings:
    """Read and validate the configuration; raise ``ConfigError`` naming every bad field."""
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(Path(path))
        _refuse_inline_secrets(data, path)
    data.update(overrides)
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


#: ``kafka.extra`` names whose values are masked (aiokafka's sasl_plain_password, tokens...).
_SECRET_NAME = re.compile(r"pass|secret|token|key|cred|auth", re.IGNORECASE)


def _plain(value: Any) -> Any:
    """A printable form of an ``extra`` value: JSON scalars as they are, objects by type."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return f"<{type(value).__name__}>"


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data with every secret masked.

    ``SecretStr`` fields dump as the mask. So do judge header and query values (gateways
    take keys there: ``X-Goog-Api-Key``, ``Ocp-Apim-Subscription-Key``, ``?key=``), the
    user info in a ``base_url``, and ``kafka.extra`` values whose names look secret.
    """
    data = settings.model_dump(mode="json", exclude={"kafka": {"extra"}})
    data["kafka"]["extra"] = {
        name: MASK if _SECRET_NAME.search(name) else _plain(value)
        for name, value in settings.kafka.extra.items()}
    for judge in data["judges"].values():
        if judge.get("type") == "openai":
            judge["base_url"] = redact_url(judge["base_url"])
            judge["headers"] = dict.fromkeys(judge["headers"], MASK)
            judge["query"] = dict.fromkeys(judge["query"], MASK)
    return data
