"""Start-up checks shared by ``check-config`` and ``run``: build everything, connect nothing."""

from __future__ import annotations

from evalstream.app.pipeline import Pipeline
from evalstream.config import Settings
from evalstream.evaluators import registry
from evalstream.formats import decoder_for
from evalstream.judges.registry import build_judges
from evalstream.metrics import Metrics

__all__ = ["check_settings", "describe_evaluators"]


def check_settings(settings: Settings) -> None:
    """Build judges, every route's evaluators and every input's decoder, then discard them.

    Raises:
        ConfigError: naming the offending field (unknown evaluator, bad params, bad mapping).
    """
    metrics = Metrics()
    judges = build_judges(settings.judges, metrics)
    Pipeline(settings, judges, metrics)
    for topic in settings.inputs:
        decoder_for(topic)


def describe_evaluators() -> list[tuple[str, str]]:
    """(name, one-line summary) of every registered evaluator."""
    return registry.describe()
