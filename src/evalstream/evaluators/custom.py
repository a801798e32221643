"""User-defined evaluators declared in the config: a ``classifier`` and a ``scorer``.

The labels and rubric come from the configuration (trusted), so they go into the
instructions; the event's fields go into data. Both have the result shapes of the builtin
label and scale evaluators.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from evalstream.errors import SkipEvaluation
from evalstream.evaluators.base import Evaluator, Score, add_reason
from evalstream.evaluators.common import (
    TextParams,
    clip,
    conversation_of,
    render_turns,
)
from evalstream.evaluators.labels import LabelEvaluator, reject_repeats
from evalstream.evaluators.registry import register
from evalstream.evaluators.scales import scale_score
from evalstream.events import TraceEvent
from evalstream.judges.base import JudgeRequest
from evalstream.judges.logprobs import fold

__all__ = ["Classifier", "ClassifierParams", "Scorer", "ScorerParams", "event_fields", "needed"]

Field_ = Literal["input", "output", "conversation", "context", "system_prompt", "reference"]


def _default_fields() -> list[Field_]:
    return ["input", "output"]


# Matched whole (``fullmatch``): with ``match``, ``$`` also matched before a final newline,
# so "safe\n" passed and broke its line of the judge's instructions and answer format.
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")


def event_fields(event: TraceEvent, fields: list[Field_], params: TextParams
                 ) -> tuple[tuple[str, str], ...]:
    """The named event fields that are present, clipped; skips when none is."""
    data: list[tuple[str, str]] = []
    for name in fields:
        if name == "conversation":
            earlier = conversation_of(event)
            value = render_turns(earlier, max_chars=params.max_chars, max_turns=params.max_turns)
        elif name == "context":
            value = "\n---\n".join(c for c in event.context if c.strip())
        else:
            value = getattr(event, name) or ""
        if value.strip():
            data.append((name, clip(value, params.max_chars)))
    if not data:
        raise SkipEvaluation("no_" + "_".join(fields))
    return tuple(data)


def needed(fields: list[Field_]) -> tuple[frozenset[str], ...]:
    """What :func:`event_fields` skips without: one of ``fields`` (``conversation`` is made
    of ``messages``, ``input`` and ``output``)."""
    expanded = {part for name in fields
                for part in (("messages", "input", "output") if name == "conversation"
                             else (name,))}
    return (frozenset(expanded),)


class ClassifierParams(TextParams):
    """``labels``: name -> what it means; the judge picks exactly one."""

    labels: dict[str, str] = Field(min_length=2)
    fail_labels: list[str] = Field(default_factory=list)
    fields: list[Field_] = Field(default_factory=_default_fields, min_length=1)
    #: What is being classified, in a sentence (goes before the label list).
    instructions: str = "Classify the data into exactly one of the labels below."

    @field_validator("labels")
    @classmethod
    def _names(cls, labels: dict[str, str]) -> dict[str, str]:
        bad = [n for n in labels if not _LABEL.fullmatch(n)]
        if bad:
            raise ValueError(f"label names {bad} must be letters, digits, _ or - (at most 40)")
        # Judges match answers to labels case-insensitively (``fold``), so "Yes" and "yes"
        # would collapse into one label: reject them here instead.
        by_fold: dict[str, list[str]] = {}
        for name in labels:
            by_fold.setdefault(fold(name), []).append(name)
        clashes = [names for names in by_fold.values() if len(names) > 1]
        if clashes:
            raise ValueError(f"label names {clashes} differ only in case; judges read answers "
                             "case-insensitively, so give each label a distinct name")
        return labels

    @field_validator("fail_labels")
    @classmethod
    def _known(cls, fail: list[str], info: ValidationInfo) -> list[str]:
        unknown = [x for x in fail if x not in (info.data.get("labels") or {})]
        if unknown:
            raise ValueError(f"unknown labels {unknown}; use names from `labels`")
        reject_repeats(fail, "labels")
        return fail


@register
class Classifier(LabelEvaluator):
    """A user-defined classifier: event fields -> one of the configured labels."""

    name = "classifier"
    version = "1"
    params_model = ClassifierParams
    summary = "user-defined labels (name: description) -> one label with its distribution"
    params: ClassifierParams

    def options(self) -> tuple[str, ...]:
        """The configured labels, in config order."""
        return tuple(self.params.labels)

    def required_fields(self) -> tuple[frozenset[str], ...]:
        """One of the configured ``fields``."""
        return needed(self.params.fields)

    def fail_labels(self) -> tuple[str, ...]:
        """The configured ``fail_labels``."""
        return tuple(self.params.fail_labels)

    def request(self, event: TraceEvent) -> JudgeRequest:
        """Labels in the instructions, fields as data."""
        lines = "".join(f"\n- {n}: {d}" for n, d in self.params.labels.items())
        return JudgeRequest(task="classifier",
                            instructions=f"{self.params.instructions}\nLabels:{lines}",
                            question="Which label fits?", options=self.options(),
                            data=event_fields(event, self.params.fields, self.params))


class ScorerParams(TextParams):
    """A 1..``levels`` rubric; ``threshold`` is the worst acceptable level."""

    rubric: str = Field(min_length=10)
    levels: int = Field(default=5, ge=2, le=9)
    threshold: int = Field(default=3, ge=1, le=9)
    higher_is_better: bool = True
    fields: list[Field_] = Field(default_factory=_default_fields, min_length=1)

    @model_validator(mode="after")
    def _threshold_on_scale(self) -> ScorerParams:
        if self.threshold > self.levels:
            raise ValueError(f"threshold {self.threshold} is above levels {self.levels}")
        return self


@register
class Scorer(Evaluator[ScorerParams]):
    """A user-defined rubric: event fields -> 1..N with the distribution."""

    asks_own_task = True

    name = "scorer"
    version = "1"
    params_model = ScorerParams
    summary = "user-defined 1-N rubric -> expected level, p(acceptable level)"

    def labels(self) -> tuple[str, ...]:
        """"1".."N"."""
        return tuple(str(i) for i in range(1, self.params.levels + 1))

    def required_fields(self) -> tuple[frozenset[str], ...]:
        """One of the configured ``fields``."""
        return needed(self.params.fields)

    def request(self, event: TraceEvent) -> JudgeRequest:
        """Rubric in the instructions, fields as data."""
        n = self.params.levels
        return JudgeRequest(
            task="scorer",
            instructions=f"Score the data from 1 to {n} using this rubric:\n{self.params.rubric}",
            question=f"Which score from 1 to {n}?", options=self.labels(),
            data=event_fields(event, self.params.fields, self.params))

    async def evaluate(self, event: TraceEvent) -> Score:
        """Ask for the level distribution."""
        request = self.request(event)
        judgement = await self.judge.judge(request)
        score = scale_score(judgement, self.params.levels, self.params.threshold,
                            lower_is_better=not self.params.higher_is_better)
        return await add_reason(self, score, request.data, rationale=judgement.rationale)
