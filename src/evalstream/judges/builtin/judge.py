"""The offline judge: dispatches a request's ``task`` to a lexicon/pattern scorer.

Every scorer returns the same probability shape the LLM judge returns (yes/no, a 1..5
distribution, or a distribution over labels) plus a short rationale, so an evaluator cannot
tell which judge answered except by ``JudgeInfo.backend``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalstream.errors import JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import GenerateRequest, Generation, Judge, Judgement, JudgeRequest
from evalstream.judges.builtin.refusal import score_refusal
from evalstream.judges.registry import judge_backend
from evalstream.metrics import Metrics

__all__ = ["TASKS", "BuiltinJudge"]

Scorer = Callable[[JudgeRequest], tuple[dict[str, float], str]]


def _required(request: JudgeRequest, name: str) -> str:
    value = request.field(name)
    if value is None:
        raise JudgeUnsupportedError(
            f"builtin judge: task {request.task!r} needs data field {name!r}")
    return value


def _refusal(request: JudgeRequest) -> tuple[dict[str, float], str]:
    return score_refusal(_required(request, "output"))


#: task -> scorer. Extended as scorers land; ``supports`` reads this table.
TASKS: dict[str, Scorer] = {
    "refusal": _refusal,
}

_GENERATORS: dict[str, Callable[[GenerateRequest], tuple[str, Any]]] = {}


class BuiltinJudge(Judge):
    """Lexicons and patterns; no network, no model files, microseconds per call."""

    def __init__(self, name: str = "builtin") -> None:
        self.name = name
        # Frozen and shared: the builtin judge costs nothing, so one info object serves
        # every answer (no per-call allocation on the hot path).
        self._info = JudgeInfo(backend="builtin", model="builtin-v1", requests=0)

    def supports(self, task: str) -> bool:
        """Whether ``task`` has a builtin scorer (see the INTERFACES table)."""
        return task in TASKS

    async def judge(self, request: JudgeRequest) -> Judgement:
        """Score ``request`` offline.

        Raises:
            JudgeUnsupportedError: unknown task or a required data field is missing.
        """
        scorer = TASKS.get(request.task)
        if scorer is None:
            raise JudgeUnsupportedError(
                f"builtin judge cannot answer task {request.task!r} "
                f"(supported: {', '.join(sorted(TASKS))})")
        probabilities, rationale = scorer(request)
        return Judgement(probabilities=probabilities, info=self._info, rationale=rationale)

    def judge_sync(self, request: JudgeRequest) -> Judgement:
        """The same as :meth:`judge` without a coroutine (benchmarks, offline tools)."""
        scorer = TASKS.get(request.task)
        if scorer is None:
            raise JudgeUnsupportedError(f"builtin judge cannot answer task {request.task!r}")
        probabilities, rationale = scorer(request)
        return Judgement(probabilities=probabilities, info=self._info, rationale=rationale)

    async def generate(self, request: GenerateRequest) -> Generation:
        """Reasons, role extraction and summaries, by template.

        Raises:
            JudgeUnsupportedError: any other task.
        """
        generator = _GENERATORS.get(request.task)
        if generator is None:
            raise JudgeUnsupportedError(
                f"builtin judge cannot generate for task {request.task!r} "
                f"(supported: {', '.join(sorted(_GENERATORS))})")
        text, value = generator(request)
        return Generation(text=text, info=self._info, value=value)


@judge_backend("builtin")
def _make_builtin(name: str, config: Any, metrics: Metrics,
                  built: Mapping[str, Judge]) -> Judge:
    del config, metrics, built  # nothing to configure, nothing to meter
    return BuiltinJudge(name)
