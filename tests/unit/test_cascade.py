"""Cascade judge paths the end-to-end cascade test does not reach.

``test_judge_safety.py`` covers "confident: answered" and "unsure: escalated" with the real
builtin and an HTTP judge. These use scripted judges to pin the remaining decisions: the
first judge claiming a task but then refusing it, generation, and the confidence boundary.
The last one uses the real builtin: an apology followed by the answer escalates.
"""

from __future__ import annotations

import pytest

from evalstream.errors import JudgeError, JudgeSpendCapError, JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import GenerateRequest, JudgeRequest, judge_info_of, with_judge_info
from evalstream.judges.builtin import BuiltinJudge
from evalstream.judges.cascade import CascadeJudge
from evalstream.metrics import Metrics
from tests.support.scripted_judge import ScriptedJudge, prompt_chars


def request(task: str = "refusal") -> JudgeRequest:
    return JudgeRequest(task=task, instructions="Decide.", question="Refused?",
                        data=(("output", "no"),))


def decisions(metrics: Metrics) -> dict[str, float]:
    return {d: metrics.registry.get_sample_value(
        "evalstream_judge_escalations_total", {"judge": "smart", "decision": d}) or 0.0
        for d in ("answered", "escalated", "unsupported", "capped")}


def cascade(first: ScriptedJudge, then: ScriptedJudge, metrics: Metrics,
            min_confidence: float = 0.6) -> CascadeJudge:
    return CascadeJudge("smart", first, then, min_confidence, metrics)


async def test_first_judge_refusing_a_task_it_claims_falls_back_to_the_second() -> None:
    # supports() says yes, but the request lacks what the first judge needs: it raises
    # JudgeUnsupportedError at judge time, and the cascade must ask the second judge instead
    # of failing the evaluation.
    def refuse(req: JudgeRequest) -> dict[str, float]:
        raise JudgeUnsupportedError("needs a field this request lacks")

    first = ScriptedJudge({"refusal": refuse}, name="cheap")
    then = ScriptedJudge({"refusal": {"yes": 0.2, "no": 0.8}}, name="llm", rationale="why")
    metrics = Metrics()
    answer = await cascade(first, then, metrics).judge(request())
    assert first.tasks() == ["refusal"]  # it was asked first
    assert then.tasks() == ["refusal"]
    assert dict(answer.probabilities) == {"yes": 0.2, "no": 0.8}
    assert answer.rationale == "why"
    # A fallback, not an escalation: the first judge gave no answer to be unsure about.
    assert answer.info.escalated is False
    assert decisions(metrics) == {"answered": 0.0, "escalated": 0.0, "unsupported": 1.0,
                                  "capped": 0.0}


async def test_other_first_judge_errors_are_not_swallowed() -> None:
    # Only "unsupported" falls back; anything else is the first judge's failure to report.
    def broken(req: JudgeRequest) -> dict[str, float]:
        raise RuntimeError("bug in the cheap judge")

    first = ScriptedJudge({"refusal": broken})
    then = ScriptedJudge({"refusal": {"yes": 0.5, "no": 0.5}})
    with pytest.raises(RuntimeError, match="bug in the cheap judge"):
        await cascade(first, then, Metrics()).judge(request())
    assert then.requests == []


async def test_generation_goes_to_the_second_judge_only() -> None:
    first = ScriptedJudge(generate={"reason": "template reason"}, name="cheap")
    then = ScriptedJudge(generate={"reason": ("llm reason", {"k": 1})}, name="llm")
    generated = await cascade(first, then, Metrics()).generate(
        GenerateRequest(task="reason", instructions="Explain.", data=(("output", "x"),)))
    assert (generated.text, generated.value) == ("llm reason", {"k": 1})
    assert first.generations == []
    assert [g.task for g in then.generations] == ["reason"]


@pytest.mark.parametrize(("probs", "decision"), [
    # Binary fractions, so the confidence is exactly 0.5 (0.8 - 0.2 is 0.6000000000000001,
    # which a ">" would also let stand and so could not pin the boundary).
    ({"yes": 0.75, "no": 0.25}, "answered"),    # confidence 0.5 == min_confidence: stands
    ({"yes": 0.625, "no": 0.375}, "escalated"),  # confidence 0.25 < 0.5
])
async def test_confidence_at_the_threshold_stands(probs: dict[str, float],
                                                  decision: str) -> None:
    first = ScriptedJudge({"refusal": probs}, name="cheap")
    then = ScriptedJudge({"refusal": {"yes": 0.1, "no": 0.9}}, name="llm")
    metrics = Metrics()
    answer = await cascade(first, then, metrics, min_confidence=0.5).judge(request())
    counts = decisions(metrics)
    assert counts[decision] == 1.0
    assert sum(counts.values()) == 1.0
    assert answer.info.capped is False
    if decision == "answered":
        assert dict(answer.probabilities) == probs
        assert then.requests == []
    else:
        assert dict(answer.probabilities) == {"yes": 0.1, "no": 0.9}
        assert answer.info.escalated is True


def test_a_cascade_supports_what_either_judge_supports() -> None:
    first = ScriptedJudge({"refusal": {"yes": 1.0}}, name="cheap")
    then = ScriptedJudge({"topic": {"a": 1.0}}, name="llm")
    judge = cascade(first, then, Metrics())
    assert judge.name == "smart"
    assert judge.supports("refusal")  # the first judge's task only
    assert judge.supports("topic")  # the second judge's task only
    assert not judge.supports("toxicity")


def capped(req: JudgeRequest) -> dict[str, float]:
    raise JudgeSpendCapError("judge 'llm': spend cap reached")


async def test_a_capped_second_judge_leaves_the_first_judges_answer() -> None:
    # Unsure but an answer: better than an error result while the LLM judge is capped.
    first = ScriptedJudge({"refusal": {"yes": 0.6, "no": 0.4}}, name="cheap")
    then = ScriptedJudge({"refusal": capped}, name="llm")
    metrics = Metrics()
    answer = await cascade(first, then, metrics).judge(request())
    assert then.tasks() == ["refusal"]  # it was asked, and refused
    assert dict(answer.probabilities) == {"yes": 0.6, "no": 0.4}
    assert answer.info.escalated is False
    # The result says so: an unsure first answer kept for the cap, not a confident one.
    assert answer.info.capped is True
    assert decisions(metrics) == {"answered": 0.0, "escalated": 0.0, "unsupported": 0.0,
                                  "capped": 1.0}


async def test_a_capped_second_judge_is_an_error_when_the_first_had_no_answer() -> None:
    def refuse(req: JudgeRequest) -> dict[str, float]:
        raise JudgeUnsupportedError("needs a field this request lacks")

    for first in (ScriptedJudge({"refusal": refuse}, name="cheap"),  # claims, then refuses
                  ScriptedJudge({"topic": {"a": 1.0}}, name="cheap")):  # does not claim
        metrics = Metrics()
        judge = cascade(first, ScriptedJudge({"refusal": capped}, name="llm"), metrics)
        with pytest.raises(JudgeSpendCapError, match="spend cap reached"):
            await judge.judge(request())
        assert decisions(metrics)["capped"] == 0.0
        assert decisions(metrics)["unsupported"] == 1.0


async def test_other_second_judge_failures_still_fail_as_escalations() -> None:
    def down(req: JudgeRequest) -> dict[str, float]:
        raise JudgeError("upstream 503 after retries")

    first = ScriptedJudge({"refusal": {"yes": 0.6, "no": 0.4}}, name="cheap")
    metrics = Metrics()
    with pytest.raises(JudgeError, match="503"):
        await cascade(first, ScriptedJudge({"refusal": down}), metrics).judge(request())
    assert decisions(metrics) == {"answered": 0.0, "escalated": 1.0, "unsupported": 0.0,
                                  "capped": 0.0}


async def test_an_escalated_answer_carries_what_the_unsure_first_judge_spent() -> None:
    # A first step may be a paid LLM (a small model before a large one): its unsure answer
    # was paid for, and was in no result once the second judge's info replaced it.
    first = ScriptedJudge({"refusal": {"yes": 0.55, "no": 0.45}}, name="small")
    then = ScriptedJudge({"refusal": {"yes": 0.1, "no": 0.9}}, name="large")
    answer = await cascade(first, then, Metrics()).judge(request())
    spent = first._info(prompt_chars(request()))
    own = then._info(prompt_chars(request()))
    assert answer.info.escalated is True
    assert answer.info.requests == own.requests + spent.requests == 2
    assert answer.info.tokens_in == own.tokens_in + spent.tokens_in
    assert answer.info.tokens_out == 2


async def test_a_failed_escalation_carries_what_the_first_judge_spent() -> None:
    def down(req: JudgeRequest) -> dict[str, float]:
        raise with_judge_info(JudgeError("upstream 503"),
                              JudgeInfo(backend="openai", model="large", requests=3))

    first = ScriptedJudge({"refusal": {"yes": 0.6, "no": 0.4}}, name="small")
    with pytest.raises(JudgeError) as caught:
        await cascade(first, ScriptedJudge({"refusal": down}), Metrics()).judge(request())
    info = judge_info_of(caught.value)
    assert info is not None
    assert (info.model, info.requests, info.escalated) == ("large", 4, True)


async def test_an_apology_followed_by_the_answer_escalates_past_the_real_builtin() -> None:
    # The builtin judge used to score this as a confident refusal (p 0.94: its opening is
    # one), so the cascade kept that wrong answer and never asked the LLM. Now the builtin
    # is unsure and the LLM decides; a plain refusal still stands without an LLM call.
    answer_after_apology = (
        "I'm sorry, but I can't help with logging in to your server. However, here is how "
        "to stop the process yourself:\n\n1. Find its id with `ps aux | grep worker`.\n"
        "2. Send it a polite signal with `kill <pid>`.\n"
        "3. If it is still there after a few seconds, use `kill -9 <pid>`.")
    plain_refusal = "I'm sorry, but I can't help with that."
    then = ScriptedJudge({"refusal": {"yes": 0.05, "no": 0.95}}, name="llm")
    metrics = Metrics()
    judge = CascadeJudge("smart", BuiltinJudge(), then, 0.6, metrics)  # the config default

    def refusal(output: str) -> JudgeRequest:
        return JudgeRequest(task="refusal", instructions="", question="",
                            data=(("output", output),))

    escalated = await judge.judge(refusal(answer_after_apology))
    assert escalated.info.escalated is True
    assert escalated.p("no") == pytest.approx(0.95)
    kept = await judge.judge(refusal(plain_refusal))
    assert kept.info.backend == "builtin"
    assert kept.p("yes") > 0.9
    assert len(then.requests) == 1  # only the answer after the apology reached the LLM
    assert decisions(metrics) == {"answered": 1.0, "escalated": 1.0, "unsupported": 0.0,
                                  "capped": 0.0}
