"""A cascade: a cheap judge answers when it is confident, else an LLM judge does.

Per request, the first judge (usually ``builtin``) answers; when its confidence (|p-0.5|x2
for two options, top minus runner-up otherwise) is at least ``min_confidence`` that answer
stands, otherwise the request is escalated to the second judge. Tasks the first judge does
not support go straight to the second. When the second judge refuses an escalation
because its spend cap is reached (``JudgeSpendCapError``), the first judge's answer stands,
unsure as it is: a cap should make evaluation cheaper, not stop it; its ``JudgeInfo`` then
says ``capped``, so a result tells such an answer from a confident one. Each decision is counted
(``evalstream_judge_escalations_total{decision="answered|escalated|unsupported|capped"}``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from evalstream.config.judges import CascadeJudgeConfig
from evalstream.errors import ConfigError, JudgeError, JudgeSpendCapError, JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import (
    GenerateRequest,
    Generation,
    Judge,
    Judgement,
    JudgeRequest,
    judge_info_of,
    with_judge_info,
)
from evalstream.judges.registry import judge_backend
from evalstream.metrics import Metrics

__all__ = ["CascadeJudge"]


class CascadeJudge(Judge):
    """Ask ``first``; escalate to ``then`` below ``min_confidence``.

    Args:
        name: The configured name.
        first: The cheap judge.
        then: The judge escalated to.
        min_confidence: Confidence at or above which the first answer stands.
        metrics: The metrics container.
    """

    def __init__(self, name: str, first: Judge, then: Judge, min_confidence: float,
                 metrics: Metrics) -> None:
        self.name = name
        self.first = first
        self.then = then
        self.min_confidence = min_confidence
        self._decisions = {d: metrics.judge_escalations.labels(name, d)
                           for d in ("answered", "escalated", "unsupported", "capped")}

    def supports(self, task: str) -> bool:
        """A cascade answers what either judge answers."""
        return self.first.supports(task) or self.then.supports(task)

    async def judge(self, request: JudgeRequest) -> Judgement:
        """The first judge's answer when confident, else the second judge's (the first's
        after all when the second's spend cap refuses the escalation)."""
        if self.first.supports(request.task):
            try:
                first = await self.first.judge(request)
            except JudgeUnsupportedError:
                pass  # e.g. a required field the builtin needs is absent
            else:
                if first.confidence >= self.min_confidence:
                    self._decisions["answered"].inc()
                    return first
                try:
                    second = await self.then.judge(request)
                except JudgeSpendCapError:
                    # The second judge sent nothing: keep the first judge's answer.
                    self._decisions["capped"].inc()
                    return replace(first, info=first.info.model_copy(update={"capped": True}))
                except JudgeError as exc:
                    self._decisions["escalated"].inc()  # escalated, then it failed
                    info = judge_info_of(exc)
                    if info is not None:  # as an answer it gave would say
                        with_judge_info(exc, _escalated(info, first.info))
                    raise
                except BaseException:
                    self._decisions["escalated"].inc()  # escalated, then it failed
                    raise
                self._decisions["escalated"].inc()
                return Judgement(probabilities=second.probabilities,
                                 info=_escalated(second.info, first.info),
                                 rationale=second.rationale)
        self._decisions["unsupported"].inc()
        return await self.then.judge(request)

    async def generate(self, request: GenerateRequest) -> Generation:
        """Generation goes to the second (LLM) judge: templates are a last resort."""
        return await self.then.generate(request)


def _escalated(second: JudgeInfo, first: JudgeInfo) -> JudgeInfo:
    """The second judge's info for an escalated call, with what the first judge's unsure
    answer cost added: nothing for the builtin judge, but a first step may be an LLM (a
    small model before a large one), whose paid request was otherwise in no result."""
    return second.plus_spend(first, escalated=True)


@judge_backend("cascade")
def _make_cascade(name: str, config: Any, metrics: Metrics,
                  built: Mapping[str, Judge]) -> Judge:
    if not isinstance(config, CascadeJudgeConfig):  # pragma: no cover - registry guarantees
        raise TypeError(f"judges.{name}: expected a cascade config")
    for ref in (config.first, config.then):
        if ref not in built:
            raise ConfigError(f"judges.{name}: cascade refers to unknown judge {ref!r}")
    return CascadeJudge(name, built[config.first], built[config.then], config.min_confidence,
                        metrics)
