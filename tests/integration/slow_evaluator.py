"""A test-only evaluator plugin: ``test_slow`` sleeps ``delay_s`` and then passes.

Loaded through the real ``plugins:`` config hook (``plugins: [tests.integration.slow_evaluator]``),
in-process or by a ``python -m evalstream run`` subprocess whose PYTHONPATH holds the repo.
It stands in for a slow LLM judge so backpressure and draining can be observed; everything
around it (consumer, producer, commits, the real refusal evaluator) is the production code.
"""

from __future__ import annotations

import asyncio

from pydantic import Field

from evalstream.evaluators import register
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.events import TraceEvent

MODULE = __name__


class SlowParams(EvaluatorParams):
    """How long each evaluation takes."""

    delay_s: float = Field(default=0.5, ge=0.0)


@register
class SlowEvaluator(Evaluator[SlowParams]):
    """Sleeps, then scores 1.0."""

    name = "test_slow"
    params_model = SlowParams
    summary = "test only: sleeps delay_s, then passes"

    async def evaluate(self, event: TraceEvent) -> Score:
        await asyncio.sleep(self.params.delay_s)
        return Score(score=1.0, label="ok", passed=True, details={"delay_s": self.params.delay_s})
