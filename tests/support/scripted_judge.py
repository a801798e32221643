"""A deterministic Judge for tests: records every request and answers from a script.

A script maps a task to an answer. An answer is a probability mapping (returned every time),
a list of them (consumed in order, one per request) or a callable of the request. Generate
answers are strings or ``(text, value)`` pairs, likewise per task. Unscripted tasks raise
``JudgeUnsupportedError`` so a test notices a request it did not expect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union

from evalstream.errors import JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import GenerateRequest, Generation, Judge, Judgement, JudgeRequest

Probs = Mapping[str, float]
Answer = Union[Probs, Sequence[Probs], Callable[[JudgeRequest], Probs]]  # noqa: UP007
GenAnswer = Union[str, tuple[str, Any], Callable[[GenerateRequest], str]]  # noqa: UP007

__all__ = ["ScriptedJudge", "prompt_chars"]


def prompt_chars(request: JudgeRequest | GenerateRequest) -> int:
    """Characters a plain rendering of ``request`` would send (instructions, question, data)."""
    question = getattr(request, "question", "")
    options = getattr(request, "options", ())
    return (len(request.instructions) + len(question) + sum(len(o) + 2 for o in options)
            + sum(len(k) + len(v) + 4 for k, v in request.data))


class ScriptedJudge(Judge):
    """Answers from ``script``; ``requests`` and ``generations`` record what was asked."""

    def __init__(
        self,
        script: Mapping[str, Answer] | None = None,
        generate: Mapping[str, GenAnswer] | None = None,
        *,
        name: str = "scripted",
        rationale: str | None = None,
    ) -> None:
        self.name = name
        self.script = dict(script or {})
        self.generate_script = dict(generate or {})
        self.rationale = rationale
        self.requests: list[JudgeRequest] = []
        self.generations: list[GenerateRequest] = []
        self._cursor: dict[str, int] = {}

    def supports(self, task: str) -> bool:
        """Only scripted tasks."""
        return task in self.script

    def _info(self, chars: int) -> JudgeInfo:
        return JudgeInfo(backend="scripted", model="script", requests=1, tokens_in=chars // 4,
                         tokens_out=1)

    async def judge(self, request: JudgeRequest) -> Judgement:
        """Record ``request`` and answer from the script."""
        self.requests.append(request)
        answer = self.script.get(request.task)
        if answer is None:
            raise JudgeUnsupportedError(f"scripted judge has no answer for {request.task!r}")
        if callable(answer):
            probs = answer(request)
        elif isinstance(answer, Mapping):
            probs = answer
        else:
            index = self._cursor.get(request.task, 0)
            self._cursor[request.task] = index + 1
            probs = answer[min(index, len(answer) - 1)]
        return Judgement(probabilities=dict(probs), info=self._info(prompt_chars(request)),
                         rationale=self.rationale)

    async def generate(self, request: GenerateRequest) -> Generation:
        """Record ``request`` and answer from the generate script."""
        self.generations.append(request)
        answer = self.generate_script.get(request.task)
        if answer is None:
            raise JudgeUnsupportedError(f"scripted judge cannot generate {request.task!r}")
        if callable(answer):
            text, value = answer(request), None
        elif isinstance(answer, tuple):
            text, value = answer
        else:
            text, value = answer, None
        return Generation(text=text, info=self._info(prompt_chars(request)), value=value)

    def tasks(self) -> list[str]:
        """The tasks of the judge requests so far, in order."""
        return [r.task for r in self.requests]
