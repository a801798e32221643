"""The one frozen settings object: a YAML file plus ``EVALSTREAM_`` environment overrides.

Environment variables use ``__`` between levels (``EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS``)
and win over the file. Secrets (judge API keys, the SASL password) come only from the
environment or from files and are held as ``SecretStr``. This package is the only code
that reads ``os.environ``.

The model is in ``settings.py`` (sections of their own in ``kafka``, ``topics``, ``routes``,
``judges`` and ``drift``), reading it in ``loading.py``, printing it safely in
``masking.py``; import from this package.
"""

from __future__ import annotations

from evalstream.config.drift import DriftSettings
from evalstream.config.judges import (
    BuiltinJudgeConfig,
    CascadeJudgeConfig,
    JudgeConfig,
    OpenAIJudgeConfig,
)
from evalstream.config.kafka import KafkaSettings
from evalstream.config.loading import format_validation_error, load_settings
from evalstream.config.masking import masked_dump
from evalstream.config.match_values import Accepted
from evalstream.config.routes import (
    STRATA_FIELDS,
    EvaluatorSpec,
    MatchRule,
    Route,
    SamplingSettings,
    SessionWindow,
    Strata,
)
from evalstream.config.settings import (
    CanarySettings,
    LabelSettings,
    LoggingSettings,
    ResultSettings,
    ServerSettings,
    Settings,
    WorkerSettings,
)
from evalstream.config.topics import InputTopic, TopicSettings

__all__ = [
    "STRATA_FIELDS",
    "Accepted",
    "BuiltinJudgeConfig",
    "CanarySettings",
    "CascadeJudgeConfig",
    "DriftSettings",
    "EvaluatorSpec",
    "InputTopic",
    "JudgeConfig",
    "KafkaSettings",
    "LabelSettings",
    "LoggingSettings",
    "MatchRule",
    "OpenAIJudgeConfig",
    "ResultSettings",
    "Route",
    "SamplingSettings",
    "ServerSettings",
    "SessionWindow",
    "Settings",
    "Strata",
    "TopicSettings",
    "WorkerSettings",
    "format_validation_error",
    "load_settings",
    "masked_dump",
]
