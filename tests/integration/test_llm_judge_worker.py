"""A configured OpenAI-compatible judge, from a YAML config, through the worker over HTTP.

Unlike ``test_all_evaluators_worker.py`` (which swaps a scripted judge in), nothing here is
injected: the worker builds its ``openai`` judge from the config file's ``judges`` section,
and the judge talks to the local fake LLM server (``tests/support/llm_server.py``) on a real
socket, in the chat-completions logprobs shape. The server scripts each answer from the
prompt it receives, so the published labels and scores prove that each result came from its
own HTTP answer, and its request log proves how many requests the worker sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import load_settings
from evalstream.events import dump_json
from tests.integration.workerkit import Topics, config_dict, results, running, write_config
from tests.support.broker import Broker
from tests.support.kafka import produce
from tests.support.llm_server import llm_server

pytestmark = pytest.mark.integration

EVENTS = 6
MODEL = "judge-model-x"
PRICE_IN, PRICE_OUT = 0.5, 2.0  # per 1k tokens, to check usage reaches judge info


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"])


def decide(body: dict[str, Any]) -> dict[str, float]:
    """The "model": answer each task from the event's content (markers set below)."""
    text = prompt_text(body)
    if "grounded in the given context" in text:
        return {"no": 0.9, "yes": 0.1} if "INVENTED" in text else {"yes": 0.8, "no": 0.2}
    if "refuses the user's request" in text:
        return {"yes": 0.9, "no": 0.1} if "I can't help" in text else {"no": 0.95, "yes": 0.05}
    # Anything else is a request this test did not expect: make it visible in the results.
    return {"maybe": 1.0}


def event(i: int) -> bytes:
    """Odd events refuse; every third event makes a claim the context does not support."""
    refuse = i % 2 == 1
    invented = i % 3 == 0
    output = ("I'm sorry, but I can't help with that request." if refuse
              else f"Hotel {i} has rooms tonight.")
    if invented:
        output += " INVENTED: breakfast is free."
    return dump_json({"event_id": f"e{i}", "trace_id": f"trace-{i}", "app": "hotels",
                      "input": f"Any rooms at hotel {i} tonight?", "output": output,
                      "context": [f"Hotel {i} has rooms tonight."]})


async def test_openai_judge_from_config_through_worker(
        broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = Topics.fresh("llmjudge")
    await topics.create(broker.bootstrap, partitions=2)
    monkeypatch.setenv("LLMJUDGE_TEST_KEY", "sk-test-123")
    async with llm_server(decide=decide) as server:
        config = write_config(tmp_path / "worker.yaml", config_dict(
            broker.bootstrap, topics,
            judges={"llm": {"type": "openai", "base_url": server.url, "model": MODEL,
                            "api_key_env": "LLMJUDGE_TEST_KEY", "max_retries": 0,
                            "timeout_s": 10, "price_input_per_1k": PRICE_IN,
                            "price_output_per_1k": PRICE_OUT}},
            routes=[{"name": "rag", "evaluators": [
                {"evaluator": "groundedness", "judge": "llm"},
                {"evaluator": "refusal", "judge": "llm"}]}]))
        # No ``judges=``: the worker builds (and closes) the judge the config describes.
        worker = Worker(load_settings(config), registry=CollectorRegistry())
        async with running(worker):
            await produce(broker.bootstrap, topics.inputs, [event(i) for i in range(EVENTS)])
            published = await results(broker.bootstrap, topics.results, expect=2 * EVENTS,
                                      timeout=30)

    assert len(published) == 2 * EVENTS
    got = {(r["event_id"], r["evaluator"]): r for r in published}
    assert len(got) == 2 * EVENTS  # one result per event and evaluator, no duplicates
    for i in range(EVENTS):
        grounded, refusal = got[(f"e{i}", "groundedness")], got[(f"e{i}", "refusal")]
        for r in (grounded, refusal):
            assert r["status"] == "ok", r["error"]
            info = r["judge"]
            assert (info["backend"], info["model"]) == ("openai", MODEL)
            assert (info["requests"], info["cached"]) == (1, False)
            assert info["tokens_in"] > 0
            assert info["tokens_out"] == 1
            assert info["cost_usd"] == pytest.approx(
                (info["tokens_in"] * PRICE_IN + info["tokens_out"] * PRICE_OUT) / 1000)
        if i % 3 == 0:
            assert (grounded["label"], grounded["passed"]) == ("ungrounded", False)
            assert grounded["score"] == pytest.approx(0.1)
        else:
            assert (grounded["label"], grounded["passed"]) == ("grounded", True)
            assert grounded["score"] == pytest.approx(0.8)
        if i % 2 == 1:
            assert (refusal["label"], refusal["passed"]) == ("refused", False)
            assert refusal["score"] == pytest.approx(0.1)  # p(not refused)
        else:
            assert (refusal["label"], refusal["passed"]) == ("not_refused", True)
            assert refusal["score"] == pytest.approx(0.95)

    # Exactly one HTTP request per (event, evaluator): no retries, no hidden extra calls.
    assert len(server.posts) == 2 * EVENTS
    for post in server.posts:
        assert post.path == "/v1/chat/completions"
        assert post.body["model"] == MODEL
        assert (post.body["logprobs"], post.body["max_tokens"]) == (True, 1)
        assert post.headers["authorization"] == "Bearer sk-test-123"
