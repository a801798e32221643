"""The evaluator contract: an event in, a ``Score`` out, by asking a ``Judge``."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from evalstream.config import EvaluatorSpec
from evalstream.events import JudgeInfo, TraceEvent
from evalstream.judges.base import Judge

__all__ = ["Evaluator", "EvaluatorParams", "Score"]


class EvaluatorParams(BaseModel):
    """Base of every evaluator's ``params`` model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


P = TypeVar("P", bound=EvaluatorParams)


@dataclass(frozen=True, slots=True)
class Score:
    """What an evaluator concluded; the pipeline wraps it into an ``EvalResult``.

    ``score`` is the probability of the good outcome (0..1); ``raw_score`` keeps the native
    scale (1-5, 0-100) where it differs.
    """

    score: float | None
    label: str | None
    passed: bool | None
    threshold: float | None = None
    confidence: float | None = None
    probabilities: dict[str, float] = field(default_factory=dict)
    raw_score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    judge: JudgeInfo | None = None


class Evaluator(abc.ABC, Generic[P]):
    """One configured evaluator instance in one route.

    Subclasses set ``name`` and ``params_model`` and implement ``evaluate``. They raise
    ``SkipEvaluation`` when the event lacks what they need (e.g. no output).
    """

    name: ClassVar[str]
    params_model: ClassVar[type[EvaluatorParams]] = EvaluatorParams
    #: One line for ``evalstream list-evaluators``.
    summary: ClassVar[str] = ""
    #: Label evaluators (topic, sentiment...) report their label mix to drift detection.
    is_label_evaluator: ClassVar[bool] = False

    def __init__(self, spec: EvaluatorSpec, params: P, judge: Judge) -> None:
        self.spec = spec
        self.params = params
        self.judge = judge

    @property
    def label(self) -> str:
        """The evaluator's name in results and metrics."""
        return self.spec.label

    def labels(self) -> tuple[str, ...]:
        """The closed set of labels this evaluator can emit (bounds metric labels)."""
        return ()

    @abc.abstractmethod
    async def evaluate(self, event: TraceEvent) -> Score:
        """Score one event."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release anything held (caches are in memory; most need nothing)."""
