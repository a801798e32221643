"""The judge contract every evaluator asks and every backend answers.

An evaluator describes *what* to decide as a ``JudgeRequest``: a task key, fixed
instructions, a question, the answer options and the untrusted data. A backend decides *how*:
the LLM backend renders a prompt (instructions first, data last and delimited) and reads the
first-token distribution; the builtin judge dispatches on ``task`` to lexicons and patterns.
Either way the answer is a probability per option, so evaluators never parse text.
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from evalstream.errors import JudgeError
from evalstream.events import JudgeInfo

__all__ = [
    "YES_NO",
    "GenerateRequest",
    "Generation",
    "Judge",
    "JudgeRequest",
    "Judgement",
    "judge_info_of",
    "own_copy",
    "with_judge_info",
]

YES_NO: tuple[str, str] = ("yes", "no")
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _NamedData:
    """Lookup by name in a request's untrusted ``data`` pairs."""

    __slots__ = ()
    data: tuple[tuple[str, str], ...]

    def field(self, name: str) -> str | None:
        """The value of data field ``name`` (None when absent)."""
        for key, value in self.data:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class JudgeRequest(_NamedData):
    """A closed question about some data.

    Attributes:
        task: What kind of question this is (``"refusal"``, ``"topic_adherence"``,
            ``"classifier"``...). The builtin judge dispatches on it; LLM backends use it
            only for metrics and logs.
        instructions: Fixed, trusted text that frames the decision (rubric, label meanings,
            criteria from the config). Rendered first so provider prompt caches hit.
        question: The question the answer options answer, e.g. "Does the answer refuse?".
        options: The answers, each a single short token: ``("yes", "no")``, ``("1", ... "5")``
            or label names. The judge returns a probability for each.
        data: Untrusted named fields (output, input, conversation...), rendered last inside
            a delimited data block that content cannot close.
        hints: Trusted structured parameters for non-LLM judges (topic names, the role,
            the threshold...). Never shown to an LLM as instructions.
    """

    task: str
    instructions: str
    question: str
    options: tuple[str, ...] = YES_NO
    data: tuple[tuple[str, str], ...] = ()
    hints: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Judgement:
    """A judge's answer: a probability per option (summing to 1) and what it cost."""

    probabilities: Mapping[str, float]
    info: JudgeInfo
    #: A short, human-readable account of why (the builtin judge fills it; LLMs do not).
    rationale: str | None = None

    def p(self, option: str) -> float:
        """Probability of ``option`` (0 when the option is unknown)."""
        return float(self.probabilities.get(option, 0.0))

    @property
    def top(self) -> str:
        """The most probable option."""
        return max(self.probabilities, key=lambda k: self.probabilities[k])

    @property
    def confidence(self) -> float:
        """How decided the answer is: |p-0.5|x2 for two options, top minus runner-up else."""
        ranked = sorted(self.probabilities.values(), reverse=True)
        if not ranked:
            return 0.0
        second = ranked[1] if len(ranked) > 1 else 0.0
        return max(0.0, min(1.0, ranked[0] - second))


@dataclass(frozen=True, slots=True)
class GenerateRequest(_NamedData):
    """A request for a short generated answer: a reason, a summary, or a JSON extraction.

    ``json_schema_hint`` (when set) asks for a JSON object; the backend parses it strictly.
    """

    task: str
    instructions: str
    data: tuple[tuple[str, str], ...] = ()
    max_tokens: int = 200
    json_schema_hint: str | None = None
    hints: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Generation:
    """Generated text (or a parsed JSON value) and what it cost."""

    text: str
    info: JudgeInfo
    value: Any = None


class Judge(abc.ABC):
    """A judge backend. Implementations classify their own retryable errors."""

    #: Configured name (the key under ``judges:``), used in metrics and results.
    name: str

    @abc.abstractmethod
    async def judge(self, request: JudgeRequest) -> Judgement:
        """Answer a closed question with a probability per option.

        Raises:
            JudgeUnsupportedError: this judge cannot answer this task.
            JudgeError: the request failed for good (after the backend's own retries).
        """

    @abc.abstractmethod
    async def generate(self, request: GenerateRequest) -> Generation:
        """Produce a short text or JSON answer (reasons, summaries, role extraction)."""

    def supports(self, task: str) -> bool:
        """Whether this judge can answer ``task`` (the builtin judge answers a fixed set)."""
        return True

    def stop_waiting(self, scopes: Collection[Hashable] | None = None) -> None:  # noqa: B027
        """Cancel requests waiting before they are sent (for budget under a spend cap with
        ``on_spend_cap: wait``, at a rate limit, an open circuit or for a connection
        slot) rather than let a drain or a revoke wait for them: all of them (the worker
        is stopping), or those whose ``judges.waits.WAIT_SCOPE`` is in ``scopes`` (revoked
        partitions' assignments), including those that start waiting later. Their
        evaluations stay uncommitted and are redelivered. An optional hook: most judges
        never wait."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most judges hold nothing
        """Release connections."""


def with_judge_info(error: JudgeError, info: JudgeInfo) -> JudgeError:
    """``error``, saying which judge failed and what the failed call spent (``info``).

    The pipeline puts it in the error result's ``judge``, as a normal result carries it:
    consumers then slice errors (judge failures, spend caps) by judge, and what a failed
    call spent is counted like any other (``evalstream eval``'s cost summary).
    """
    error.judge_info = info
    return error


def own_copy(error: JudgeError, info: JudgeInfo | None) -> JudgeError:
    """A copy of ``error`` (same type, message and attributes) carrying ``info``.

    For a caller that joined another's call in flight, which failed: a cache hands every
    such caller the first caller's exception object, with that caller's spend on it, and
    each error result would count it again. Built without calling the constructor: a
    plugin judge's ``JudgeError`` subclass may take other arguments than the message.
    """
    failure = type(error).__new__(type(error))
    failure.__dict__.update(error.__dict__)
    failure.args = error.args
    failure.judge_info = info
    return failure


def judge_info_of(error: JudgeError) -> JudgeInfo | None:
    """The ``JudgeInfo`` a judge set on ``error`` (``with_judge_info``), if any."""
    info = error.judge_info
    return info if isinstance(info, JudgeInfo) else None
