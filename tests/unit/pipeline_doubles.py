"""Test doubles for pipeline and worker unit tests: a scripted evaluator and a null judge.

The scripted evaluator's behaviour is chosen by the event's ``output`` so one route can
exercise every path: ``skip``, ``judge_error`` (``judge_error_info``: saying which judge
failed and what it spent), ``boom``, ``bad_score`` (``bad_score_costly``), ``fail``,
``opaque`` (details JSON cannot hold), ``sleep:<seconds>`` and ``ask_judge`` (asks its
judge; then pass); anything else passes with score 0.9.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evalstream.config import Settings, load_settings
from evalstream.errors import JudgeError, SkipEvaluation
from evalstream.evaluators import register
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.events import JudgeInfo, RawRecord, TraceEvent, dump_json
from evalstream.judges.base import (
    GenerateRequest,
    Generation,
    Judge,
    Judgement,
    JudgeRequest,
    with_judge_info,
)


class NullJudge(Judge):
    """Never asked: the scripted evaluators decide by themselves."""

    name = "builtin"

    async def judge(self, request: JudgeRequest) -> Judgement:
        raise AssertionError("not used")

    async def generate(self, request: GenerateRequest) -> Generation:
        raise AssertionError("not used")


JUDGES: dict[str, Judge] = {"builtin": NullJudge()}


@register
class Scripted(Evaluator[EvaluatorParams]):
    name = "unit_scripted"
    summary = "test only: behaviour scripted by the event's output"

    async def evaluate(self, event: TraceEvent) -> Score:
        output = event.output or ""
        if output.startswith("sleep:"):
            await asyncio.sleep(float(output.split(":", 1)[1]))
        elif output == "ask_judge":  # asks its judge (then passes)
            await self.judge.judge(JudgeRequest(task="unit", instructions="", question="?"))
        elif output == "skip":
            raise SkipEvaluation("no_thing")
        elif output.startswith("skip:"):  # a reason taken from the content
            raise SkipEvaluation(output.split(":", 1)[1])
        elif output == "judge_error":
            raise JudgeError("upstream 503 after retries")
        elif output == "judge_error_info":  # a judge that says who failed and what it spent
            raise with_judge_info(JudgeError("spend cap reached"), JudgeInfo(
                backend="openai", model="m", requests=2, tokens_in=10, cost_usd=0.003))
        elif output == "bad_score_costly":
            return Score(score=2.0, label="x", passed=True,
                         judge=JudgeInfo(backend="openai", model="m", requests=1,
                                         cost_usd=0.004))
        elif output == "boom":
            raise RuntimeError("evaluator bug")
        elif output == "bad_score":
            return Score(score=2.0, label="x", passed=True)
        elif output == "opaque":
            return Score(score=0.9, label="good", passed=True, details={"obj": object()})
        elif output == "costly":
            return Score(score=0.9, label="good", passed=True,
                         judge=JudgeInfo(backend="openai", model="m", cost_usd=0.002))
        elif output == "fail":
            return Score(score=0.2, label="bad", passed=False, threshold=0.5)
        return Score(score=0.9, label="good", passed=True, threshold=0.5,
                     probabilities={"good": 0.9, "bad": 0.1}, details={"k": 1})


@register
class Labels(Evaluator[EvaluatorParams]):
    name = "unit_labels"
    summary = "test only: a label evaluator with a closed label set"
    is_label_evaluator = True

    def labels(self) -> tuple[str, ...]:
        return ("billing", "other")

    async def evaluate(self, event: TraceEvent) -> Score:
        label = "billing" if "bill" in (event.output or "") else "surprise"
        return Score(score=None, label=label, passed=None)


def settings(**sections: Any) -> Settings:
    data: dict[str, Any] = {
        "inputs": [{"topic": "traces"}],
        "routes": [{"name": "main", "evaluators": [{"evaluator": "unit_scripted"}]}],
        "server": {"host": "127.0.0.1", "port": 0},
        "worker": {"commit_interval_s": 0.05, "shutdown_timeout_s": 5},
        "drift": {"enabled": False},
    }
    data.update(sections)
    return load_settings(None, **data)


def raw(i: int, output: str = "ok", partition: int = 0, **fields: Any) -> RawRecord:
    body = {"event_id": f"e{i}", "trace_id": f"t{i}", "output": output, **fields}
    return RawRecord("traces", partition, i, dump_json(body))
