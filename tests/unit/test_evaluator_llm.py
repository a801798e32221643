"""LLM-only evaluators end to end through the OpenAI-compatible judge and a local server.

The server (``tests/support/llm_server.py``) speaks the real chat-completions wire format on
a real socket and records every request, so the tests count what was actually sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.config import EvaluatorSpec, OpenAIJudgeConfig
from evalstream.evaluators import registry
from evalstream.evaluators.base import Evaluator
from evalstream.events import Message, TraceEvent
from evalstream.judges.registry import build_judges, close_judges
from evalstream.metrics import Metrics
from tests.support.llm_server import FakeLLM, llm_server

ROLE = "A hotel booking assistant: finds and books hotels, declines anything else."


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"])


async def evaluators(server: FakeLLM, specs: dict[str, dict[str, Any]]
                     ) -> tuple[dict[str, Evaluator[Any]], Any]:
    config = OpenAIJudgeConfig(base_url=server.url, model="judge-model", max_retries=0,
                               cache_size=0)
    judges = build_judges({"llm": config}, Metrics())
    built = {name: registry.create(EvaluatorSpec(evaluator=name, judge="llm", params=params),
                                   judges, where=f"test {name}")
             for name, params in specs.items()}
    return built, judges


def by_task(body: dict[str, Any]) -> dict[str, float]:
    text = prompt_text(body)
    if "grounded in the given context" in text:
        return {"yes": 0.8, "no": 0.2}
    if "How clear is the question" in text:
        return {"4": 0.6, "5": 0.4}
    if "Which label fits?" in text:
        return {"booking": 0.9, "question": 0.1}
    return {"yes": 0.5, "no": 0.5}


async def test_llm_only_evaluators_over_http() -> None:
    async with llm_server(decide=by_task) as server:
        built, judges = await evaluators(server, {
            "groundedness": {}, "question_clarity": {},
            "classifier": {"labels": {"booking": "wants to book", "question": "asks"},
                           "fields": ["input"]}})
        try:
            event = TraceEvent(event_id="e", input="Book me a hotel in Rome for 2 nights",
                               output="Booked: Hotel Roma, 2 nights.",
                               context=("Hotel Roma has rooms for 2 nights.",))
            grounded = await built["groundedness"].evaluate(event)
            clarity = await built["question_clarity"].evaluate(event)
            label = await built["classifier"].evaluate(event)
        finally:
            await close_judges(judges)
    assert len(server.posts) == 3
    for post in server.posts:
        assert post.body["max_tokens"] == 1
        assert post.body["logprobs"] is True
        system, user = post.body["messages"]
        # Untrusted content only in the data block of the user message.
        assert "Hotel Roma" not in system["content"]
        assert "<data>" in user["content"]
    assert grounded.score == pytest.approx(0.8)
    assert grounded.label == "grounded"
    assert clarity.raw_score == pytest.approx(4.4)
    assert clarity.passed is True
    assert label.label == "booking"
    assert grounded.judge is not None
    assert grounded.judge.backend == "openai"


async def test_role_adherence_stream_costs_one_http_request_per_turn() -> None:
    async with llm_server(distribution={"yes": 0.9, "no": 0.1}) as server:
        built, judges = await evaluators(server, {"role_adherence": {"chatbot_role": ROLE}})
        history: list[Message] = []
        try:
            for i in range(6):
                user, reply = f"hotel in city {i}?", f"Here are hotels in city {i}."
                result = await built["role_adherence"].evaluate(TraceEvent(
                    event_id=f"e{i}", messages=tuple(history), input=user, output=reply))
                history += [Message(role="user", content=user),
                            Message(role="assistant", content=reply)]
        finally:
            await close_judges(judges)
    assert len(server.posts) == 6  # not 21
    assert result.details["assistant_turns"] == 6
    assert result.score == 1.0
    assert all(len(prompt_text(p.body)) < 1500 for p in server.posts)
