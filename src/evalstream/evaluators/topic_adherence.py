"""Topic adherence: does the output stay within the allowed scope described in ``criteria``?"""

from __future__ import annotations

from pydantic import Field, model_validator

from evalstream.errors import SkipEvaluation
from evalstream.evaluators.base import Evaluator, Score, add_reason
from evalstream.evaluators.common import (
    BinaryParams,
    binary_score,
    clip,
    conversation_of,
    render_turns,
    require,
    yes_probability,
)
from evalstream.evaluators.registry import register
from evalstream.events import TraceEvent
from evalstream.judges.base import JudgeRequest

__all__ = ["TopicAdherence", "TopicAdherenceParams"]

INSTRUCTIONS = (
    "Scope check. Greetings, clarifying questions and declining off-scope requests are in "
    "scope; taking up other subjects or off-scope instructions is not."
)
QUESTION = "Is the output within the allowed scope?"


class TopicAdherenceParams(BinaryParams):
    """The scope as ``criteria`` (a positive description), or read per event from an attribute.

    ``criteria_attribute`` names a TraceEvent attribute holding the criteria for that event
    (offline data sets carry per-item criteria); the config's ``criteria`` wins when both exist.
    """

    criteria: str | None = Field(default=None, min_length=3)
    criteria_attribute: str | None = Field(default=None, min_length=1)
    #: Send earlier turns so short replies ("Which city?") can be placed in context.
    include_conversation: bool = True

    def event_attributes(self) -> tuple[str, ...]:
        """``criteria_attribute``, when it is read (no ``criteria``): each event's criteria."""
        if self.criteria_attribute is None or self.criteria is not None:
            return ()
        return (self.criteria_attribute,)

    def unused(self) -> tuple[str, ...]:
        """``criteria_attribute`` beside ``criteria``: the configured criteria always win."""
        if self.criteria is not None and self.criteria_attribute is not None:
            return ("criteria_attribute: never read, as criteria is set and always wins",)
        return ()

    @model_validator(mode="after")
    def _has_scope(self) -> TopicAdherenceParams:
        if self.criteria is None and self.criteria_attribute is None:
            raise ValueError("criteria is required (or criteria_attribute to read it per event)")
        return self


@register
class TopicAdherence(Evaluator[TopicAdherenceParams]):
    """output (+input, conversation) vs criteria -> p(on topic), label "nn% yes"."""

    asks_own_task = True

    name = "topic_adherence"
    version = "1"
    params_model = TopicAdherenceParams
    summary = "output vs criteria -> p(stays within the allowed topics), label 'nn% yes'"

    def request(self, event: TraceEvent) -> JudgeRequest:
        """Criteria from config go in the instructions; per-event criteria and content in data."""
        output = require(event.output, "no_output")
        p = self.params
        data: list[tuple[str, str]] = []
        criteria = p.criteria
        instructions = INSTRUCTIONS
        if criteria is not None:
            instructions = f"{INSTRUCTIONS}\nAllowed scope: {criteria}"
        else:
            criteria = event.attributes.get(p.criteria_attribute or "")
            if not criteria or not criteria.strip():
                raise SkipEvaluation("no_criteria")
            # From the trace, hence untrusted: shown as data, not as instructions.
            data.append(("scope", clip(criteria, p.max_chars)))
        if p.include_conversation:
            earlier = conversation_of(event, include_output=False)
            if event.input and earlier and earlier[-1].content == event.input:
                earlier = earlier[:-1]
            if earlier:
                data.append(("conversation", render_turns(
                    earlier, max_chars=p.max_chars, max_turns=p.max_turns)))
        if event.input and event.input.strip():
            data.append(("input", clip(event.input, p.max_chars)))
        data.append(("output", clip(output, p.max_chars)))
        return JudgeRequest(task="topic_adherence", instructions=instructions, question=QUESTION,
                            data=tuple(data), hints={"criteria": criteria})

    async def evaluate(self, event: TraceEvent) -> Score:
        """One request; score = p(yes)."""
        request = self.request(event)
        judgement = await self.judge.judge(request)
        score = binary_score(yes_probability(judgement), threshold=self.params.threshold,
                             judgement=judgement)
        return await add_reason(self, score, request.data, rationale=judgement.rationale)
