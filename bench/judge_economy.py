"""Judge economy: requests, prompt characters and output tokens per evaluation.

For a 4-turn conversation (user, assistant, user, assistant), role adherence and topic
adherence are run through the real evaluators; every judge request is rendered with the LLM
judges' own prompt renderer (``evalstream.judges.prompt``), exactly as the OpenAI-compatible
backend sends it, and counted. Baselines measured in the same run: the same evaluators with
their per-turn cache disabled (every event re-judges every turn) and a 6-turn stream.
Reference figures for other tools (deepeval, ragas) are quoted from the project brief, not
measured here.

Run: ``python bench/judge_economy.py``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalstream.config import EvaluatorSpec, OpenAIJudgeConfig
from evalstream.evaluators import registry
from evalstream.events import JudgeInfo, Message, TraceEvent
from evalstream.judges.base import GenerateRequest, Generation, Judge, Judgement, JudgeRequest
from evalstream.judges.prompt import generate_messages, judge_messages
from evalstream.judges.registry import build_judges, close_judges
from evalstream.metrics import Metrics

# The local OpenAI-compatible test server lives with the tests (repo root on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.llm_server import llm_server

ROLE = ("A customer-support assistant for Acme's online shop: answers questions about orders, "
        "deliveries, returns and refunds; politely declines anything else.")
CRITERIA = "Questions about the customer's own orders, deliveries, returns and refunds."
TURNS = [
    ("user", "Hi, my order #48213 was supposed to arrive on Monday but the tracking page has "
             "not updated since Friday. Can you check what is going on?"),
    ("assistant", "I'm sorry for the delay. Order #48213 left our warehouse on Friday and the "
                  "courier reports it is held at the regional depot because of a missed scan. "
                  "It should be delivered within two working days."),
    ("user", "OK. If it does not come by Thursday, can I cancel it and get my money back?"),
    ("assistant", "Yes. If it has not arrived by Thursday you can cancel it from your orders "
                  "page and the refund goes back to your card within 3-5 working days."),
]
#: Quoted from the project brief (other tools, same task), for orientation only.
QUOTED = {"deepeval role adherence": (2, 4511), "ragas topic adherence": (3, 10612)}


@dataclass
class CountingJudge(Judge):
    """Renders each request as the LLM backend would and counts it; always answers yes."""

    name: str = "counting"
    chars: list[int] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)

    async def judge(self, request: JudgeRequest) -> Judgement:
        messages = judge_messages(request, json_answer=False)
        self.chars.append(sum(len(m["content"]) for m in messages))
        self.tasks.append(request.task)
        return Judgement(probabilities={"yes": 0.9, "no": 0.1},
                         info=JudgeInfo(backend="counting", requests=1, tokens_out=1))

    async def generate(self, request: GenerateRequest) -> Generation:
        messages = generate_messages(request)
        self.chars.append(sum(len(m["content"]) for m in messages))
        self.tasks.append(request.task)
        return Generation(text="", info=JudgeInfo(backend="counting", requests=1))


def stream(turns: list[tuple[str, str]]) -> list[TraceEvent]:
    """One event per assistant turn; earlier turns in ``messages``."""
    events, history = [], []
    for i, (role, content) in enumerate(turns):
        if role == "assistant":
            user = turns[i - 1][1]
            events.append(TraceEvent(event_id=f"e{i}", session_id="s",
                                     messages=tuple(history[:-1]), input=user, output=content))
        history.append(Message(role=role, content=content))
    return events


async def measure(name: str, params: dict[str, Any], events: list[TraceEvent]
                  ) -> tuple[int, int, list[int]]:
    """(requests, prompt chars, per-event requests) for scoring ``events`` in order."""
    judge = CountingJudge()
    evaluator = registry.create(EvaluatorSpec(evaluator=name, judge="c", params=params),
                                {"c": judge}, where="bench")
    per_event = []
    for event in events:
        before = len(judge.chars)
        await evaluator.evaluate(event)
        per_event.append(len(judge.chars) - before)
    return len(judge.chars), sum(judge.chars), per_event


def row(label: str, requests: int, chars: int, evaluations: int) -> str:
    return (f"{label:<58} {requests:>4} req {chars:>7,} chars  per evaluation: "
            f"{requests / evaluations:>4.1f} req {chars / evaluations:>7,.0f} chars  "
            "1 output token/req")


async def over_http(name: str, params: dict[str, Any], events: list[TraceEvent]
                    ) -> tuple[int, int, int, int]:
    """(POSTs, prompt chars, prompt tokens, max output tokens) seen by a local server."""
    async with llm_server(distribution={"yes": 0.9, "no": 0.1}) as server:
        config = OpenAIJudgeConfig(base_url=server.url, model="judge", cache_size=0)
        judges = build_judges({"llm": config}, Metrics())
        try:
            evaluator = registry.create(EvaluatorSpec(evaluator=name, judge="llm",
                                                      params=params), judges, where="bench")
            for event in events:
                await evaluator.evaluate(event)
        finally:
            await close_judges(judges)
        posts = server.posts
        chars = sum(len(m["content"]) for p in posts for m in p.body["messages"])
        # The server's own estimate (body JSON / 4), as it reports in ``usage``.
        tokens = sum(max(1, len(p.raw) // 4) for p in posts)
        max_out = max((int(p.body.get("max_tokens", 0)) for p in posts), default=0)
        return len(posts), chars, tokens, max_out


async def main() -> None:
    events = stream(TURNS)
    last = events[-1]
    role = {"chatbot_role": ROLE}
    print("4-turn conversation (user, assistant, user, assistant); one evaluation = one "
          "(event, evaluator)")
    print("Output tokens: 1 per request in logprobs mode (max_tokens 1, the answer is read from "
          "the first token's distribution); about 6 ({\"output\": \"yes\"}) in the JSON "
          "fallback for backends without logprobs.")
    req, chars, per = await measure("role_adherence", role, events)
    print(row("role_adherence, stream (2 events, per-turn cache)", req, chars, len(events)),
          per)
    base_req, base_chars, base_per = await measure(
        "role_adherence", {**role, "cache_size": 0}, events)
    print(row("  baseline: same, cache disabled (re-judge all turns)", base_req, base_chars,
              len(events)), base_per)
    one_req, one_chars, _ = await measure("role_adherence", role, [last])
    print(row("role_adherence, whole conversation in one event (cold)", one_req, one_chars, 1))
    last_req, last_chars, _ = await measure("role_adherence", {**role, "only_last_turn": True},
                                            [last])
    print(row("role_adherence, only_last_turn (one event)", last_req, last_chars, 1))
    ta_req, ta_chars, _ = await measure("topic_adherence", {"criteria": CRITERIA}, [last])
    print(row("topic_adherence, one event with the 4 turns", ta_req, ta_chars, 1))

    print("\nMeasured at a local OpenAI-compatible server (chat completions, logprobs):")
    for label, name, params, evs in (
            ("role_adherence, stream of 2 events", "role_adherence", role, events),
            ("topic_adherence, one event with the 4 turns", "topic_adherence",
             {"criteria": CRITERIA}, [last])):
        posts, sent, tokens, max_out = await over_http(name, params, evs)
        print(f"  {label:<46} {posts} POSTs, {sent:,} prompt chars ({sent / len(evs):,.0f} per "
              f"evaluation), ~{tokens:,} request tokens, max_tokens {max_out}")

    six = stream([(r, f"{c} ({i // 4})") for i, (r, c) in enumerate(TURNS * 3)])
    s_req, _, _ = await measure("role_adherence", role, six)
    n_req, _, _ = await measure("role_adherence", {**role, "cache_size": 0}, six)
    print(f"\n6 assistant turns arriving as 6 events: {s_req} requests with the per-turn cache "
          f"vs {n_req} without ({n_req / s_req:.1f}x)")
    print("\nQuoted reference figures (not measured here): "
          + "; ".join(f"{k}: {r} requests / {c:,} chars" for k, (r, c) in QUOTED.items()))
    deepeval = QUOTED["deepeval role adherence"][1]
    ragas = QUOTED["ragas topic adherence"][1]
    print(f"ratios vs quoted: role adherence cold {one_chars / deepeval:.2f}x chars, stream "
          f"per evaluation {chars / len(events) / deepeval:.2f}x; topic adherence "
          f"{ta_chars / ragas:.2f}x chars")


if __name__ == "__main__":
    # No options: --help prints what it measures rather than running it.
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    asyncio.run(main())
