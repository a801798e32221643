"""Label evaluators: the judge picks one of a closed set of labels (topic, sentiment).

The judge returns a distribution over the labels; the result's label is the most probable
one and ``probabilities`` carries the whole distribution. Labels listed in ``fail_labels``
count as failures: then ``score`` = 1 - p(a failing label) and ``passed`` = the label is not
a failing one. With no failing labels the evaluator only classifies (score and passed unset).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field, ValidationInfo, field_validator

from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score, add_reason
from evalstream.evaluators.common import TextParams, TextSource, clip, require, text_of
from evalstream.evaluators.registry import register
from evalstream.events import TraceEvent
from evalstream.judges.base import Judgement, JudgeRequest
from evalstream.judges.scoring import normalise

__all__ = ["LabelEvaluator", "Sentiment", "Topic", "label_score", "reject_repeats"]

# Matched whole (``fullmatch``): ``$`` also matches before a final newline.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


def reject_repeats(values: Sequence[str], what: str) -> None:
    """Raise ``ValueError`` naming the repeated ``values`` (a config mistake, found at start-up).

    A failing label listed twice would otherwise be counted twice in the score.
    """
    repeated = sorted({v for v in values if list(values).count(v) > 1})
    if repeated:
        raise ValueError(f"{what} repeated: {repeated}; list each once")


def label_score(judgement: Judgement, options: Sequence[str], fail_labels: Sequence[str]) -> Score:
    """A label result from a distribution over ``options`` (ties go to the earlier option)."""
    probs = normalise(judgement.probabilities, options)
    label = max(options, key=lambda o: probs[o])
    ranked = sorted(probs.values(), reverse=True)
    confidence = ranked[0] - (ranked[1] if len(ranked) > 1 else 0.0)
    score: float | None = None
    passed: bool | None = None
    if fail_labels:
        # Over distinct labels: a label listed twice must not be subtracted twice (the
        # params reject repeats, but callers of this function may not have params).
        failing = set(fail_labels)
        score = max(0.0, 1.0 - sum(probs[o] for o in failing if o in probs))
        passed = label not in failing
    return Score(score=score, label=label, passed=passed, confidence=min(1.0, confidence),
                 probabilities=probs, judge=judgement.info)


class LabelEvaluator(Evaluator[EvaluatorParams]):
    """Shared ``evaluate`` of label evaluators; subclasses build the request."""

    asks_own_task = True

    is_label_evaluator = True

    def options(self) -> tuple[str, ...]:
        """The labels, in the order the judge is offered them."""
        raise NotImplementedError

    def fail_labels(self) -> tuple[str, ...]:
        """Labels that count as failures: with any, a result passes unless its label is one
        and scores 1 minus their probability; with none (the default), a result has a
        label only, no score and no verdict."""
        return ()

    def labels(self) -> tuple[str, ...]:
        """The closed label set."""
        return self.options()

    def request(self, event: TraceEvent) -> JudgeRequest:
        """The one judge request for ``event``."""
        raise NotImplementedError

    async def evaluate(self, event: TraceEvent) -> Score:
        """Ask for the label distribution and report the most probable label."""
        request = self.request(event)
        judgement = await self.judge.judge(request)
        score = label_score(judgement, self.options(), self.fail_labels())
        return await add_reason(self, score, request.data, rationale=judgement.rationale)


# --- topic -------------------------------------------------------------------------------

TOPIC_INSTRUCTIONS = (
    "Classify what this exchange between a user and an AI assistant is about, using both the "
    "user's message and the assistant's reply. Answer with exactly one topic name from the "
    "list, or \"other\" when none fits.\nTopics:\n"
)


class TopicParams(TextParams):
    """``topics``: name -> description; ``fail_topics``: topics that count as failures."""

    topics: dict[str, str] = Field(min_length=1)
    fail_topics: list[str] = Field(default_factory=list)

    @field_validator("topics")
    @classmethod
    def _names(cls, topics: dict[str, str]) -> dict[str, str]:
        for name in topics:
            if not _NAME.fullmatch(name) or name == "other":
                raise ValueError(f"topic name {name!r} must be lower-case letters, digits, _ or -"
                                 " (at most 40), and not 'other'")
        return topics

    @field_validator("fail_topics")
    @classmethod
    def _known(cls, fail: list[str], info: ValidationInfo) -> list[str]:
        topics = info.data.get("topics") or {}
        unknown = [t for t in fail if t != "other" and t not in topics]
        if unknown:
            raise ValueError(f"unknown topics {unknown}; use names from `topics` or 'other'")
        reject_repeats(fail, "topics")
        return fail


@register
class Topic(LabelEvaluator):
    """input + output -> one configured topic or "other", with the distribution."""

    name = "topic"
    version = "1"
    params_model = TopicParams
    summary = "input+output -> one of the configured topics or 'other' (label evaluator)"
    params: TopicParams

    def options(self) -> tuple[str, ...]:
        """Configured topics then "other"."""
        return (*self.params.topics, "other")

    def fail_labels(self) -> tuple[str, ...]:
        """The configured ``fail_topics``."""
        return tuple(self.params.fail_topics)

    def request(self, event: TraceEvent) -> JudgeRequest:
        """Topics (trusted config) in the instructions; the exchange as data."""
        output = require(event.output, "no_output")
        lines = "".join(f"- {n}: {d}\n" for n, d in self.params.topics.items())
        data: list[tuple[str, str]] = []
        if event.input and event.input.strip():
            data.append(("input", clip(event.input, self.params.max_chars)))
        data.append(("output", clip(output, self.params.max_chars)))
        return JudgeRequest(
            task="topic",
            instructions=TOPIC_INSTRUCTIONS + lines + "- other: none of the above",
            question="Which topic is the exchange about?",
            options=self.options(),
            data=tuple(data),
            hints={"topics": dict(self.params.topics)},
        )


# --- sentiment ---------------------------------------------------------------------------

SENTIMENT_INSTRUCTIONS = (
    "Classify the emotional tone of the text: negative (displeasure, anger, sadness, "
    "complaint), neutral (factual or no clear emotion) or positive (satisfaction, joy, thanks)."
)
SENTIMENTS: tuple[str, str, str] = ("negative", "neutral", "positive")


class SentimentParams(TextParams):
    """``source``: which text to read; ``fail_labels``: sentiments that count as failures."""

    source: TextSource = "input"
    fail_labels: list[str] = Field(default_factory=list)

    @field_validator("fail_labels")
    @classmethod
    def _known(cls, fail: list[str]) -> list[str]:
        unknown = [x for x in fail if x not in SENTIMENTS]
        if unknown:
            raise ValueError(f"unknown sentiments {unknown}; use {list(SENTIMENTS)}")
        reject_repeats(fail, "sentiments")
        return fail


@register
class Sentiment(LabelEvaluator):
    """A text (the user's input by default) -> negative / neutral / positive."""

    name = "sentiment"
    version = "1"
    params_model = SentimentParams
    summary = "text (input by default) -> negative / neutral / positive (label evaluator)"
    params: SentimentParams
    OPTIONS: ClassVar[tuple[str, ...]] = SENTIMENTS

    def options(self) -> tuple[str, ...]:
        """The three sentiments."""
        return self.OPTIONS

    def fail_labels(self) -> tuple[str, ...]:
        """The configured ``fail_labels``."""
        return tuple(self.params.fail_labels)

    def request(self, event: TraceEvent) -> JudgeRequest:
        """The text as data."""
        return JudgeRequest(task="sentiment", instructions=SENTIMENT_INSTRUCTIONS,
                            question="What is the tone of the text?", options=self.OPTIONS,
                            data=(("text", text_of(event, self.params.source, self.params)),))
