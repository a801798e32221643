"""The offline judge: dispatches a request's ``task`` to a lexicon/pattern scorer.

Every scorer returns the same probability shape the LLM judge returns (yes/no, a 1..5
distribution, or a distribution over labels) plus a short rationale, so an evaluator cannot
tell which judge answered except by ``JudgeInfo.backend``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalstream.errors import JudgeError, JudgeUnsupportedError
from evalstream.events import JudgeInfo
from evalstream.judges.base import (
    GenerateRequest,
    Generation,
    Judge,
    Judgement,
    JudgeRequest,
    with_judge_info,
)
from evalstream.judges.builtin._common import as_read
from evalstream.judges.builtin.frustration import score_frustration
from evalstream.judges.builtin.generate import extract_role, summarise
from evalstream.judges.builtin.injection import score_injection
from evalstream.judges.builtin.refusal import score_refusal
from evalstream.judges.builtin.role import score_role
from evalstream.judges.builtin.sentiment import score_sentiment
from evalstream.judges.builtin.topic import score_topic, score_topic_adherence
from evalstream.judges.builtin.toxicity import score_toxicity
from evalstream.judges.registry import judge_backend
from evalstream.metrics import Metrics

__all__ = ["TASKS", "VERSION", "BuiltinJudge"]

#: The version of the builtin judge's scoring: its lexicons, patterns, thresholds and how
#: it reads text. Bump it in any change after which the same request can get a different
#: answer: it is part of the result id of every evaluator judged by it (directly or in a
#: cascade), so a re-score after an upgrade gets new ids, and it shows in results as
#: ``judge.model`` (``builtin-v3``). At ``"1"`` it adds nothing to result ids (ids from
#: before it existed stay the same). Letters, digits, ``.``, ``_``, ``-``.
#: ``tests/unit/test_builtin_version.py`` pins the judge's answers to a fixed set of
#: requests against it, so a change of scores without a bump fails there.
VERSION = "3"

Scorer = Callable[[JudgeRequest], tuple[dict[str, float], str]]


def _required(request: JudgeRequest, name: str) -> str:
    value = request.field(name)
    if value is None:
        raise JudgeUnsupportedError(
            f"builtin judge: task {request.task!r} needs data field {name!r}")
    return value


def _refusal(request: JudgeRequest) -> tuple[dict[str, float], str]:
    return score_refusal(as_read(_required(request, "output")))


def _text(request: JudgeRequest) -> str:
    # "text" is the contract; fall back to the usual names so a caller that passes the
    # output (toxicity of an answer) or the input (injection in a prompt) also works.
    for name in ("text", "output", "input", "conversation"):
        value = request.field(name)
        if value is not None:
            return value
    raise JudgeUnsupportedError(
        f"builtin judge: task {request.task!r} needs data field 'text'")


def _on_text(fn: Callable[[str], tuple[dict[str, float], str]]) -> Scorer:
    def scorer(request: JudgeRequest) -> tuple[dict[str, float], str]:
        # Read as a reader does: an invisible or fullwidth character must not hide a word.
        return fn(as_read(_text(request)))

    return scorer


def _hint_str(request: JudgeRequest | GenerateRequest, name: str) -> str | None:
    value = request.hints.get(name)
    return value if isinstance(value, str) and value.strip() else None


def _topic_adherence(request: JudgeRequest) -> tuple[dict[str, float], str]:
    criteria = _hint_str(request, "criteria")
    if criteria is None:
        raise JudgeUnsupportedError("builtin judge: topic_adherence needs hint 'criteria'")
    return score_topic_adherence(_required(request, "output"), criteria,
                                 request.field("input"), request.field("conversation"))


def _topic(request: JudgeRequest) -> tuple[dict[str, float], str]:
    topics = request.hints.get("topics")
    if not isinstance(topics, Mapping) or not topics:
        raise JudgeUnsupportedError("builtin judge: topic needs hint 'topics' (name -> text)")
    text = " ".join(v for v in (request.field("input"), _required(request, "output")) if v)
    probs, why = score_topic(text, {str(k): str(v) for k, v in topics.items()})
    # Answer exactly the options asked for (topic names + "other"), in their spelling.
    if request.options and set(request.options) != set(probs):
        probs = {o: probs.get(o, 0.0) for o in request.options}
        total = sum(probs.values()) or 1.0
        probs = {k: v / total for k, v in probs.items()}
    return probs, why


def _behaviours(request: JudgeRequest) -> tuple[str, ...]:
    value = request.hints.get("behaviours")
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)):
        return tuple(str(v) for v in value)
    return ()


def _role_violation(request: JudgeRequest) -> tuple[dict[str, float], str]:
    system_prompt = request.field("system_prompt") or _hint_str(request, "system_prompt")
    role = _hint_str(request, "role") or system_prompt
    if role is None and _behaviours(request):
        role = ""  # configured behaviour rules alone drive the check
    if role is None:
        raise JudgeUnsupportedError("builtin judge: role_violation needs hint 'role'")
    return score_role(_required(request, "output"), role, system_prompt=system_prompt,
                      user=request.field("input"), conversation=request.field("conversation"),
                      behaviours=_behaviours(request))


def _role_adherence(request: JudgeRequest) -> tuple[dict[str, float], str]:
    role = _hint_str(request, "role") or request.field("system_prompt")
    if role is None:
        raise JudgeUnsupportedError("builtin judge: role_adherence needs hint 'role'")
    turn = request.field("turn") or _required(request, "output")
    return score_role(turn, role, system_prompt=request.field("system_prompt") or role,
                      user=request.field("user") or request.field("input"),
                      conversation=request.field("conversation"),
                      behaviours=_behaviours(request))


#: task -> scorer; ``supports`` reads this table.
TASKS: dict[str, Scorer] = {
    "refusal": _refusal,
    "sentiment": _on_text(score_sentiment),
    "toxicity": _on_text(score_toxicity),
    "frustration": _on_text(score_frustration),
    "prompt_injection": _on_text(score_injection),
    "topic_adherence": _topic_adherence,
    "topic": _topic,
    "role_violation": _role_violation,
    "role_adherence": _role_adherence,
}

def _reason(request: GenerateRequest) -> tuple[str, Any]:
    # Evaluators name themselves after the task they ask ("refusal", "sentiment"...).
    task = _hint_str(request, "task") or _hint_str(request, "evaluator")
    judgement = request.field("judgement") or ""
    given = _hint_str(request, "rationale")
    if given is not None:
        # What the scorer said with the full request (criteria, topics, role as hints);
        # re-scoring below only sees the data and would lose them.
        return f"{judgement}: {given}".strip(": "), None
    scorer = TASKS.get(task) if task else None
    if scorer is not None:
        fields = tuple((k, v) for k, v in request.data if k != "judgement")
        again = JudgeRequest(task=str(task), instructions="", question="", data=fields,
                             hints=request.hints)
        try:
            _, rationale = scorer(again)
        except JudgeUnsupportedError:
            rationale = ""
        if rationale:
            return f"{judgement}: {rationale}".strip(": "), None
    return (f"Judged {judgement} by the builtin lexical judge." if judgement
            else "Judged by the builtin lexical judge."), None


def _role_extraction(request: GenerateRequest) -> tuple[str, Any]:
    system_prompt = request.field("system_prompt")
    if system_prompt is None:
        raise JudgeUnsupportedError("builtin judge: role_extraction needs data 'system_prompt'")
    value = extract_role(system_prompt)
    return value["role"], value


def _summarization(request: GenerateRequest) -> tuple[str, Any]:
    conversation = request.field("conversation")
    if conversation is None:
        raise JudgeUnsupportedError("builtin judge: summarization needs data 'conversation'")
    text = summarise(conversation, limit=max(80, request.max_tokens * 4))
    return text, None


_GENERATORS: dict[str, Callable[[GenerateRequest], tuple[str, Any]]] = {
    "reason": _reason,
    "role_extraction": _role_extraction,
    "summarization": _summarization,
}


class BuiltinJudge(Judge):
    """Lexicons and patterns; no network, no model files, microseconds per call."""

    def __init__(self, name: str = "builtin") -> None:
        self.name = name
        # Frozen and shared: the builtin judge costs nothing, so one info object serves
        # every answer (no per-call allocation on the hot path).
        self._info = JudgeInfo(backend="builtin", model=f"builtin-v{VERSION}", requests=0)

    def supports(self, task: str) -> bool:
        """Whether ``task`` has a builtin scorer (a key of :data:`TASKS`)."""
        return task in TASKS

    async def judge(self, request: JudgeRequest) -> Judgement:
        """Score ``request`` offline.

        Raises:
            JudgeUnsupportedError: unknown task or a required data field is missing.
        """
        return self.judge_sync(request)

    def judge_sync(self, request: JudgeRequest) -> Judgement:
        """The same as :meth:`judge` without a coroutine (benchmarks, offline tools)."""
        scorer = TASKS.get(request.task)
        if scorer is None:
            raise with_judge_info(JudgeUnsupportedError(
                f"builtin judge cannot answer task {request.task!r} "
                f"(supported: {', '.join(sorted(TASKS))})"), self._info)
        try:
            probabilities, rationale = scorer(request)
        except JudgeError as exc:  # a required hint or field is missing: say which judge
            with_judge_info(exc, self._info)
            raise
        return Judgement(probabilities=probabilities, info=self._info, rationale=rationale)

    async def generate(self, request: GenerateRequest) -> Generation:
        """Reasons, role extraction and summaries, by template.

        Raises:
            JudgeUnsupportedError: any other task.
        """
        generator = _GENERATORS.get(request.task)
        if generator is None:
            raise with_judge_info(JudgeUnsupportedError(
                f"builtin judge cannot generate for task {request.task!r} "
                f"(supported: {', '.join(sorted(_GENERATORS))})"), self._info)
        try:
            text, value = generator(request)
        except JudgeError as exc:
            with_judge_info(exc, self._info)
            raise
        return Generation(text=text, info=self._info, value=value)


@judge_backend("builtin")
def _make_builtin(name: str, config: Any, metrics: Metrics,
                  built: Mapping[str, Judge]) -> Judge:
    del config, metrics, built  # nothing to configure, nothing to meter
    return BuiltinJudge(name)
