"""Retrieval-augmented generation checks: groundedness, answer and context relevancy.

Each is one yes/no question where "yes" is the good outcome, so ``score`` = p(yes).
"""

from __future__ import annotations

from typing import ClassVar

from evalstream.evaluators.base import Evaluator, Score, add_reason
from evalstream.evaluators.common import (
    BinaryParams,
    binary_score,
    clip,
    require,
    yes_probability,
)
from evalstream.evaluators.registry import register
from evalstream.events import TraceEvent
from evalstream.judges.base import JudgeRequest

__all__ = ["AnswerRelevancy", "ContextRelevancy", "Groundedness", "YesNoEvaluator"]

_SEPARATOR = "\n---\n"


class YesNoEvaluator(Evaluator[BinaryParams]):
    """A yes/no question where yes is good; subclasses give the wording and data."""

    asks_own_task = True

    params_model = BinaryParams
    task: ClassVar[str]
    instructions: ClassVar[str]
    question: ClassVar[str]
    #: (label when passed, label when failed)
    outcome: ClassVar[tuple[str, str]]

    def labels(self) -> tuple[str, ...]:
        """The two outcome labels."""
        return self.outcome

    def data(self, event: TraceEvent) -> tuple[tuple[str, str], ...]:
        """The untrusted fields."""
        raise NotImplementedError

    def _context(self, event: TraceEvent) -> str:
        """The chunks, each clipped to a fair share, within ``max_chars`` in all.

        Each chunk keeps at least 200 characters (less says nothing), so with many chunks
        only the first ones fit: retrievers rank the most relevant first. Without the overall
        cap 2,000 chunks sent about 400k characters whatever ``max_chars`` said.
        """
        chunks = [c for c in event.context if c.strip()]
        if not chunks:
            require(None, "no_context")
        budget = self.params.max_chars
        per = max(200, budget // len(chunks))
        parts: list[str] = []
        used = 0
        for chunk in chunks:
            part = clip(chunk, min(per, budget - used))
            parts.append(part)
            used += len(part) + len(_SEPARATOR)
            if used >= budget - 100:  # no room left for a useful piece of another chunk
                break
        return clip(_SEPARATOR.join(parts), budget)

    async def evaluate(self, event: TraceEvent) -> Score:
        """One request; score = p(yes)."""
        request = JudgeRequest(task=self.task, instructions=self.instructions,
                               question=self.question, data=self.data(event))
        judgement = await self.judge.judge(request)
        score = binary_score(yes_probability(judgement), threshold=self.params.threshold,
                             labels=self.outcome, probability_names=self.outcome,
                             judgement=judgement)
        return await add_reason(self, score, request.data, rationale=judgement.rationale)


@register
class Groundedness(YesNoEvaluator):
    """Answer vs retrieved context -> grounded / ungrounded."""

    name = "groundedness"
    version = "1"
    summary = "output vs context -> grounded / ungrounded; score = p(grounded)"
    task = "groundedness"
    instructions = (
        "You check whether an answer is grounded in the given context: every claim it makes "
        "is supported by, or follows from, the context. Ignore your own knowledge."
    )
    question = "Is the answer fully supported by the context?"
    outcome = ("grounded", "ungrounded")

    def data(self, event: TraceEvent) -> tuple[tuple[str, str], ...]:
        """Context then answer."""
        context = self._context(event)
        return (("context", context),
                ("answer", clip(require(event.output, "no_output"), self.params.max_chars)))


@register
class AnswerRelevancy(YesNoEvaluator):
    """Question + answer -> relevant / irrelevant."""

    name = "answer_relevancy"
    version = "1"
    summary = "input + output -> relevant / irrelevant; score = p(relevant)"
    task = "answer_relevancy"
    instructions = (
        "You check whether an answer addresses the question it replies to. Judge relevance "
        "only, not whether the answer is factually correct."
    )
    question = "Does the answer address the question?"
    outcome = ("relevant", "irrelevant")

    def data(self, event: TraceEvent) -> tuple[tuple[str, str], ...]:
        """Question then answer."""
        return (("question", clip(require(event.input, "no_input"), self.params.max_chars)),
                ("answer", clip(require(event.output, "no_output"), self.params.max_chars)))


@register
class ContextRelevancy(YesNoEvaluator):
    """Question + retrieved context -> relevant / irrelevant."""

    name = "context_relevancy"
    version = "1"
    summary = "input + context -> relevant / irrelevant; score = p(relevant)"
    task = "context_relevancy"
    instructions = (
        "You check whether retrieved context contains the information needed to answer the "
        "question. Context that is only on the same subject but cannot answer it is irrelevant."
    )
    question = "Does the context contain what is needed to answer the question?"
    outcome = ("relevant", "irrelevant")

    def data(self, event: TraceEvent) -> tuple[tuple[str, str], ...]:
        """Question then context."""
        question = clip(require(event.input, "no_input"), self.params.max_chars)
        return (("question", question), ("context", self._context(event)))
