"""A failing judge says which judge it is and what the failed call spent.

The pipeline puts that ``JudgeInfo`` in the error result's ``judge`` (see test_pipeline), so
errors can be sliced by judge and their spend counted. The OpenAI judge is tested against a
local OpenAI-compatible server on a real socket.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.errors import JudgeError, JudgeSpendCapError, JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import GenerateRequest, JudgeRequest, judge_info_of, with_judge_info
from evalstream.judges.builtin import BuiltinJudge
from evalstream.judges.cascade import CascadeJudge
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.judges.openai_wire import Usage
from evalstream.judges.spend import SpendCapWait
from evalstream.metrics import Metrics
from tests.support.llm_server import FakeLLM, llm_server
from tests.support.scripted_judge import ScriptedJudge


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()  # see test_judge_openai.py


def question(output: str = "a") -> JudgeRequest:
    return JudgeRequest(task="refusal", instructions="Decide whether the answer refuses.",
                        question="Does the answer refuse the request?",
                        data=(("output", output),))


def judge_for(server: FakeLLM, **overrides: Any) -> OpenAIJudge:
    # 100 prompt tokens at $0.5 per 1k and 1 completion token at $2 per 1k: $0.052 a request.
    settings: dict[str, Any] = {
        "base_url": server.url, "model": "judge-model", "timeout_s": 2.0,
        "backoff_base_s": 0.01, "backoff_max_s": 0.02, "max_retries": 1, "deadline_s": 10.0,
        "price_input_per_1k": 0.5, "price_output_per_1k": 2.0}
    settings.update(overrides)
    return OpenAIJudge("gpt", OpenAIJudgeConfig(**settings), Metrics())


async def failure_info(judge: OpenAIJudge) -> JudgeInfo:
    """The ``JudgeInfo`` on the error ``judge`` raises for a question (then closed)."""
    try:
        with pytest.raises(JudgeError) as caught:
            await judge.judge(question())
    finally:
        await judge.aclose()
    info = judge_info_of(caught.value)
    assert info is not None
    return info


async def test_a_failed_request_says_which_judge_and_how_many_attempts() -> None:
    async with llm_server(always="500") as server:
        info = await failure_info(judge_for(server))
    assert (info.backend, info.model, info.requests) == ("openai", "judge-model", 2)
    assert (info.tokens_in, info.cost_usd) == (0, 0.0)  # a 500 is not billed


async def test_an_unusable_answer_carries_what_it_cost() -> None:
    async with llm_server(prompt_tokens=100, always="nooptions") as server:
        info = await failure_info(judge_for(server, max_retries=0))
    assert (info.requests, info.tokens_in, info.tokens_out) == (1, 100, 1)
    assert info.cost_usd == pytest.approx(0.052)


async def test_at_the_spend_cap_the_judge_is_named_and_nothing_was_spent() -> None:
    async with llm_server(prompt_tokens=100) as server:
        judge = judge_for(server, spend_cap_usd=0.05)
        try:
            await judge.judge(question("a"))  # $0.052: the cap is reached
            with pytest.raises(JudgeSpendCapError) as caught:
                await judge.judge(question("b"))
        finally:
            await judge.aclose()
    assert len(server.posts) == 1
    info = judge_info_of(caught.value)
    assert info is not None
    assert (info.backend, info.model, info.requests, info.cost_usd) == (
        "openai", "judge-model", 0, 0.0)


async def test_callers_sharing_a_failed_request_do_not_both_count_its_spend() -> None:
    # Identical questions in flight share one request (the cache): every caller gets its
    # failure, but only the one that sent it spent anything.
    async with llm_server(prompt_tokens=100, always="nooptions", delay_s=0.2) as server:
        judge = judge_for(server, max_retries=0)
        try:
            outcomes = await asyncio.gather(judge.judge(question()), judge.judge(question()),
                                            return_exceptions=True)
        finally:
            await judge.aclose()
    assert len(server.posts) == 1
    assert all(isinstance(o, JudgeError) for o in outcomes)
    errors = [o for o in outcomes if isinstance(o, JudgeError)]
    infos = [judge_info_of(e) for e in errors]
    assert sorted(i.requests for i in infos if i is not None) == [0, 1]
    assert errors[0] is not errors[1]
    assert {type(e) for e in errors} == {type(errors[0])}
    assert str(errors[0]) == str(errors[1])


async def test_the_builtin_judge_names_itself_when_it_cannot_answer() -> None:
    judge = BuiltinJudge()
    with pytest.raises(JudgeUnsupportedError) as unknown:
        await judge.judge(JudgeRequest(task="no_such_task", instructions="", question="?"))
    with pytest.raises(JudgeUnsupportedError) as missing:  # a required hint is missing
        await judge.judge(JudgeRequest(task="topic_adherence", instructions="", question="?",
                                       data=(("output", "x"),)))
    with pytest.raises(JudgeUnsupportedError) as generate:
        await judge.generate(GenerateRequest(task="no_such_task", instructions=""))
    with pytest.raises(JudgeUnsupportedError) as generate_missing:  # no system_prompt
        await judge.generate(GenerateRequest(task="role_extraction", instructions=""))
    for caught in (unknown, missing, generate, generate_missing):
        info = judge_info_of(caught.value)
        assert info is not None
        assert info.backend == "builtin"
        assert info.requests == 0


async def test_a_cascade_marks_a_failed_escalation_as_escalated() -> None:
    def failing(req: JudgeRequest) -> dict[str, float]:
        raise with_judge_info(JudgeError("upstream 503"), ScriptedJudge()._info(40))

    first = ScriptedJudge({"refusal": {"yes": 0.5, "no": 0.5}}, name="cheap")
    then = ScriptedJudge({"refusal": failing}, name="llm")
    with pytest.raises(JudgeError) as caught:
        await CascadeJudge("smart", first, then, 0.9, Metrics()).judge(question())
    info = judge_info_of(caught.value)
    assert info is not None
    assert info.escalated is True
    # The failed escalation's request, and the first (scripted, counted as paid) judge's.
    assert info.requests == 2


async def test_a_caller_that_waited_for_the_cap_then_joined_a_failed_call_keeps_its_own_error(
) -> None:
    # Caller A sends a first attempt (paid), meets the cap (on_spend_cap: wait), waits, then
    # joins B's identical request in flight, which fails. A must get an error of its own
    # carrying its own spend: writing A's info on B's exception object would replace B's
    # spend with A's (the cache hands both the same object).
    judge = OpenAIJudge("gpt", OpenAIJudgeConfig(
        base_url="http://127.0.0.1:9", model="m", price_input_per_1k=1.0), Metrics())

    async def short_wait() -> None:
        await asyncio.sleep(0.02)

    judge._spend.wait_for_room = short_wait  # type: ignore[method-assign]

    async def compute_a(usage: Usage) -> Any:
        usage.requests, usage.tokens_in = 1, 50  # the first attempt went out, then the cap
        raise SpendCapWait()

    async def compute_b(usage: Usage) -> Any:
        usage.requests, usage.tokens_in = 1, 100
        await asyncio.sleep(0.1)
        raise JudgeError("judge 'gpt': upstream 503")

    try:
        a, b = await asyncio.gather(judge._cached("k", compute_a), judge._cached("k", compute_b),
                                    return_exceptions=True)
    finally:
        await judge.aclose()
    assert isinstance(a, JudgeError)
    assert isinstance(b, JudgeError)
    assert a is not b
    info_a, info_b = judge_info_of(a), judge_info_of(b)
    assert info_b is not None
    assert (info_b.requests, info_b.tokens_in) == (1, 100)
    assert info_a is not None
    assert (info_a.requests, info_a.tokens_in) == (1, 50)


def test_only_a_judge_info_counts_as_the_failed_judges_info() -> None:
    # ``JudgeError.judge_info`` is typed ``object`` (errors sit below events): something else
    # a plugin left there is no JudgeInfo, and an error result built from it would not
    # validate, so it reads as no info at all.
    error = JudgeError("503")
    assert judge_info_of(error) is None
    error.judge_info = {"backend": "plugin", "requests": 1}
    assert judge_info_of(error) is None
    info = JudgeInfo(backend="plugin", requests=1)
    assert judge_info_of(with_judge_info(error, info)) is info
