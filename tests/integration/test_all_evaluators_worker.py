"""Every evaluator in one route, through the real worker on the real broker.

Evaluators the builtin judge answers use it; the LLM-only ones (RAG checks, clarity,
similarity, custom classifier/scorer) use a scripted judge injected as the configured
``llm`` judge, so nothing leaves the machine. A 6-turn conversation arrives as 6 events
(one partition, keyed by session); role adherence on the scripted judge must cost 6 judge
requests in total, not 21.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.evaluators import registry
from evalstream.events import dump_json, eval_result_json_schema
from evalstream.judges.builtin import BuiltinJudge
from tests.integration.workerkit import Topics, results, running, settings_for
from tests.support.broker import Broker
from tests.support.kafka import produce
from tests.support.scripted_judge import ScriptedJudge

pytestmark = pytest.mark.integration

TURNS = 6
ROLE = "A hotel booking assistant: finds and books hotels, declines anything else."
BUILTIN = {
    "refusal": {}, "prompt_injection": {}, "sentiment": {}, "frustration": {},
    "toxicity": {}, "summarization": {},
    "topic_adherence": {"criteria": "Finding and booking hotels."},
    "topic": {"topics": {"hotels": "hotel search and booking", "travel": "flights, trains"},
              "fail_topics": ["other"]},
    "role_violation": {},
    "role_adherence": {"chatbot_role": ROLE},
}
LLM = {
    "groundedness": {}, "answer_relevancy": {}, "context_relevancy": {},
    "question_clarity": {}, "text_similarity": {},
    "classifier": {"labels": {"booking": "wants to book", "question": "asks something"},
                   "fields": ["input"]},
    "scorer": {"rubric": "5 = perfectly helpful booking answer, 1 = useless"},
}


def scripted() -> ScriptedJudge:
    yes = {"yes": 0.9, "no": 0.1}
    return ScriptedJudge({
        "groundedness": yes, "answer_relevancy": yes, "context_relevancy": {"yes": 0.2, "no": 0.8},
        "question_clarity": {"4": 1.0}, "text_similarity": {"2": 0.5, "4": 0.5},
        "classifier": {"booking": 0.7, "question": 0.3}, "scorer": {"5": 0.6, "3": 0.4},
        "role_adherence": yes,
    }, generate={"reason": "scripted reason"})


def conversation() -> list[bytes]:
    events = []
    history: list[dict[str, str]] = []
    for i in range(TURNS):
        user = f"I need a hotel in Lisbon for {i + 2} nights, please."
        reply = f"I found {i + 3} hotels in Lisbon with rooms for {i + 2} nights."
        events.append(dump_json({
            "event_id": f"c{i}", "trace_id": f"t{i}", "session_id": "s1", "app": "hotels",
            "system_prompt": "You are a hotel booking assistant. Only help with hotels.",
            "messages": [*history, {"role": "user", "content": user}],
            "input": user, "output": reply,
            "context": [f"Lisbon has {i + 3} hotels with rooms this week."],
            "reference": f"There are {i + 3} hotels available in Lisbon.",
        }))
        history += [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    return events


async def test_every_evaluator_in_one_route(broker: Broker) -> None:
    topics = Topics.fresh("allevals")
    await topics.create(broker.bootstrap, partitions=1)
    specs: list[dict[str, Any]] = [
        {"evaluator": name, "params": params} for name, params in BUILTIN.items()]
    specs += [{"evaluator": name, "judge": "llm", "params": params}
              for name, params in LLM.items()]
    specs.append({"evaluator": "role_adherence", "name": "role_adherence_llm", "judge": "llm",
                  "params": {"chatbot_role": ROLE}, "reasons": "failures"})
    settings = settings_for(
        broker.bootstrap, topics,
        routes=[{"name": "everything", "evaluators": specs}],
        # Defined so the config validates; the worker gets the scripted judge under this name.
        judges={"llm": {"type": "openai", "base_url": "http://127.0.0.1:9", "model": "none"}})
    llm = scripted()
    worker = Worker(settings, registry=CollectorRegistry(),
                    judges={"builtin": BuiltinJudge(), "llm": llm})
    expected = TURNS * len(specs)
    async with running(worker):
        await produce(broker.bootstrap, topics.inputs, conversation(),
                      keys=[b"s1"] * TURNS)
        published = await results(broker.bootstrap, topics.results, expect=expected,
                                  timeout=60)

    assert len(published) == expected
    schema = eval_result_json_schema()
    by_evaluator: dict[str, list[dict[str, Any]]] = {}
    for result in published:
        jsonschema.validate({k: v for k, v in result.items() if not k.startswith("_")}, schema)
        assert result["status"] == "ok", (result["evaluator"], result["error"])
        by_evaluator.setdefault(result["evaluator"], []).append(result)
    assert set(by_evaluator) == {s.get("name") or s["evaluator"] for s in specs}
    # Each result says which version of its evaluator scored it (no config versions here).
    versions = {s.get("name") or s["evaluator"]: registry.get(s["evaluator"]).version
                for s in specs}
    assert {r["evaluator"]: r["evaluator_version"] for r in published} == versions
    assert all(len(v) == TURNS for v in by_evaluator.values())

    # Shapes per family.
    for name in ("refusal", "topic_adherence", "groundedness", "answer_relevancy",
                 "prompt_injection", "role_violation"):
        for r in by_evaluator[name]:
            assert 0.0 <= r["score"] <= 1.0
            assert r["passed"] is (r["score"] >= r["threshold"])
            assert set(r["probabilities"])
            assert r["confidence"] is not None
    assert {r["label"] for r in by_evaluator["refusal"]} == {"not_refused"}
    assert all(r["label"].endswith("% yes") for r in by_evaluator["topic_adherence"])
    assert {r["label"] for r in by_evaluator["topic"]} <= {"hotels", "travel", "other"}
    assert {r["label"] for r in by_evaluator["context_relevancy"]} == {"irrelevant"}
    for name in ("frustration", "toxicity", "question_clarity", "text_similarity", "scorer"):
        for r in by_evaluator[name]:
            assert 1.0 <= r["raw_score"] <= 5.0
            assert set(r["probabilities"]) == {"1", "2", "3", "4", "5"}
    assert {r["raw_score"] for r in by_evaluator["text_similarity"]} == {3.0}
    assert {r["label"] for r in by_evaluator["classifier"]} == {"booking"}
    assert all(r["details"]["summary"] for r in by_evaluator["summarization"])
    violation = by_evaluator["role_violation"][0]
    assert {"extracted_role", "extracted_behaviours", "affected_sections"} <= set(
        violation["details"])
    assert 0.0 <= violation["raw_score"] <= 100.0

    # Role adherence: turn k's event judges k assistant turns, but only the new one costs.
    llm_turns = sorted(by_evaluator["role_adherence_llm"],
                       key=lambda r: r["details"]["assistant_turns"])
    assert [r["details"]["assistant_turns"] for r in llm_turns] == list(range(1, TURNS + 1))
    assert all(r["score"] == 1.0 and r["reason"] is None for r in llm_turns)
    assert llm.tasks().count("role_adherence") == TURNS  # not 1+2+...+6 = 21
    builtin_turns = {r["details"]["assistant_turns"] for r in by_evaluator["role_adherence"]}
    assert builtin_turns == set(range(1, TURNS + 1))
