"""``judge.probabilities_from``: how an LLM judge gave the probabilities a score rests on.

With ``logprobs: auto`` a backend that gives no logprobs is answered in JSON instead (0 or
1 per option), so the same judge config can publish graded and stated answers. The field
says which, through every way judge calls combine into one result: turns of a
conversation, a role extraction followed by the question, a cascade's escalation.
"""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.config import EvaluatorSpec, OpenAIJudgeConfig
from evalstream.evaluators import registry
from evalstream.evaluators.base import merge_judge_info
from evalstream.events import JudgeInfo, Message, ProbabilitySource, TraceEvent, combine_sources
from evalstream.judges.base import Judgement, JudgeRequest
from evalstream.judges.builtin import BuiltinJudge
from evalstream.judges.cascade import CascadeJudge
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.metrics import Metrics
from tests.support.llm_server import llm_server
from tests.support.scripted_judge import ScriptedJudge

ROLE = "A cooking assistant that only discusses recipes."


class SourcedJudge(ScriptedJudge):
    """A scripted judge whose answers say how they were given: ``source(request)``."""

    def __init__(self, source: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source = source

    async def judge(self, request: JudgeRequest) -> Judgement:
        answer = await super().judge(request)
        info = answer.info.model_copy(update={"probabilities_from": self.source(request)})
        return Judgement(probabilities=answer.probabilities, info=info,
                         rationale=answer.rationale)


@pytest.mark.parametrize(("first", "second", "both"), [
    (None, None, None),
    ("logprobs", None, "logprobs"),
    (None, "json", "json"),
    ("json", "json", "json"),
    ("logprobs", "json", "mixed"),
    ("json", "logprobs", "mixed"),
    ("mixed", "logprobs", "mixed"),
])
def test_sources_combine(first: ProbabilitySource | None, second: ProbabilitySource | None,
                         both: ProbabilitySource | None) -> None:
    assert combine_sources(first, second) == both
    one = JudgeInfo(backend="openai", requests=1, probabilities_from=first)
    two = JudgeInfo(backend="openai", requests=1, probabilities_from=second)
    merged = merge_judge_info(one, two)
    assert merged is not None
    assert (merged.probabilities_from, merged.requests) == (both, 2)


def conversation(n_turns: int) -> TraceEvent:
    history: list[Message] = []
    for i in range(n_turns - 1):
        history += [Message(role="user", content=f"question {i}"),
                    Message(role="assistant", content=f"answer {i}")]
    last = n_turns - 1
    return TraceEvent(event_id=f"t{last}", session_id="s", messages=tuple(history),
                      input=f"question {last}", output=f"answer {last}")


async def test_a_conversation_answered_both_ways_is_mixed_and_found_turns_count() -> None:
    def source(request: JudgeRequest) -> ProbabilitySource:
        return "json" if request.field("turn") == "answer 1" else "logprobs"

    judge = SourcedJudge(source, {"role_adherence": {"yes": 0.9, "no": 0.1}})
    spec = EvaluatorSpec(evaluator="role_adherence", judge="j", params={"chatbot_role": ROLE})
    evaluator = registry.create(spec, {"j": judge}, where="test")
    both = (await evaluator.evaluate(conversation(2))).judge
    assert both is not None
    assert (both.requests, both.probabilities_from) == (2, "mixed")
    # Turn 0 again: found, not sent (nothing spent), but still a logprobs answer.
    again = (await evaluator.evaluate(conversation(1))).judge
    assert again is not None
    assert (again.requests, again.cached, again.probabilities_from) == (0, True, "logprobs")
    assert len(judge.requests) == 2


async def test_an_escalated_answer_is_the_second_judges_alone() -> None:
    # A small LLM answered from logprobs but unsure; the large one answered in JSON. The
    # score is the large one's, so it is a JSON answer, not "mixed".
    first = SourcedJudge(lambda r: "logprobs", {"refusal": {"yes": 0.5, "no": 0.5}})
    then = SourcedJudge(lambda r: "json", {"refusal": {"yes": 1.0, "no": 0.0}})
    request = JudgeRequest(task="refusal", instructions="Decide.", question="Refused?",
                           data=(("output", "no"),))
    answer = await CascadeJudge("c", first, then, 0.6, Metrics()).judge(request)
    assert answer.info.escalated
    assert (answer.info.requests, answer.info.probabilities_from) == (2, "json")


async def test_the_builtin_judge_gives_no_llm_source() -> None:
    spec = EvaluatorSpec(evaluator="refusal", judge="builtin")
    evaluator = registry.create(spec, {"builtin": BuiltinJudge()}, where="test")
    score = await evaluator.evaluate(TraceEvent(event_id="e", output="I can't help with that."))
    assert score.judge is not None
    assert score.judge.probabilities_from is None


@pytest.mark.parametrize(("always", "source"), [(None, "logprobs"), ("nologprobs", "json")])
async def test_a_result_from_the_http_judge_says_how_it_was_answered(
        always: str | None, source: str) -> None:
    # The real judge on a real socket, through an evaluator that also asks for a reason
    # (generated text, which has no source and must not hide the answer's).
    server_args: dict[str, Any] = {"text": '{"output": "Yes"}'}
    if always is not None:
        server_args["always"] = always
    async with llm_server(**server_args) as server:
        judge = OpenAIJudge("llm", OpenAIJudgeConfig(base_url=server.url, model="m",
                                                     cache_size=0), Metrics())
        spec = EvaluatorSpec(evaluator="refusal", judge="llm", reasons="always")
        evaluator = registry.create(spec, {"llm": judge}, where="test")
        score = await evaluator.evaluate(TraceEvent(event_id="e", output="I can't help."))
        await judge.aclose()
    assert score.judge is not None
    assert score.reason  # the reason call was made and merged
    assert score.judge.probabilities_from == source
