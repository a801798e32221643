"""Helpers every evaluator family shares: compact rendering of untrusted text and scoring.

Untrusted content goes into ``JudgeRequest.data`` as named fields; the judge renders them
delimited after the fixed instructions. These helpers keep those fields short: long fields
are clipped in the middle (the start and end of a text carry most of its meaning) and
conversations are rendered one line per turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field

from evalstream.errors import SkipEvaluation
from evalstream.evaluators.base import EvaluatorParams, Score
from evalstream.events import Message, TraceEvent
from evalstream.judges.base import YES_NO, Judgement
from evalstream.judges.scoring import binary_confidence, normalise

__all__ = [
    "BinaryParams",
    "TextParams",
    "TextSource",
    "binary_score",
    "clip",
    "conversation_of",
    "render_turns",
    "require",
    "text_of",
    "yes_probability",
]

_ELLIPSIS = " […] "


class TextParams(EvaluatorParams):
    """Bounds on what is sent to the judge (every evaluator accepts them)."""

    #: Longest text field sent to the judge; longer ones are clipped in the middle.
    max_chars: int = Field(default=4000, ge=100, le=200_000)
    #: Earlier turns kept when a conversation is sent (the most recent ones).
    max_turns: int = Field(default=12, ge=1, le=500)


class BinaryParams(TextParams):
    """Params of a yes/no evaluator: ``passed`` when the good outcome's probability >= threshold."""

    threshold: float = Field(default=0.5, ge=0.0, le=1.0)


def clip(text: str, max_chars: int) -> str:
    """``text`` at most ``max_chars`` long, cut in the middle (head 2/3, tail 1/3)."""
    text = text.strip()
    if len(text) <= max_chars:
        return text
    keep = max_chars - len(_ELLIPSIS)
    head = (keep * 2) // 3
    return text[:head].rstrip() + _ELLIPSIS + text[len(text) - (keep - head):].lstrip()


def render_turns(messages: Sequence[Message], *, max_chars: int, max_turns: int) -> str:
    """One ``role: text`` line per turn, the last ``max_turns`` only, each clipped.

    Newlines inside a turn are folded so that a turn cannot pose as another speaker's line.
    """
    kept = [m for m in messages if m.content.strip()][-max_turns:]
    per_turn = max(100, max_chars // max(1, len(kept)))
    lines = []
    for message in kept:
        body = " ".join(clip(message.content, per_turn).split())
        lines.append(f"{message.role}: {body}")
    return "\n".join(lines)


def conversation_of(event: TraceEvent, *, include_output: bool = True) -> list[Message]:
    """The event's turns in order: earlier messages, then input and output if not already there.

    Decoders put the whole history in ``messages``; some also repeat the last user message
    there, so ``input``/``output`` are appended only when they are not the last turns already.
    Only the last turn (or the last two, when they are this input and this output) counts: a
    user who repeats an earlier message word for word after the assistant answered has said it
    again (often a sign of frustration), so the repeat is kept as a turn of its own.
    """
    turns = [m for m in event.messages if m.role in ("user", "assistant")]
    tail = turns[-1:]
    if (event.output and len(turns) >= 2 and turns[-1].role == "assistant"
            and turns[-1].content == event.output):
        tail = turns[-2:-1]  # the history ends with this exchange: input, then output
    input_is_last = bool(tail and tail[0].role == "user" and tail[0].content == event.input)
    if not input_is_last and event.input:
        input_is_last = _in_tool_loop(event.messages, event.input)
    if event.input and not input_is_last:
        turns.append(Message(role="user", content=event.input))
    output_is_last = bool(
        event.output and turns and turns[-1].role == "assistant"
        and turns[-1].content == event.output
    )
    if output_is_last and not include_output:
        # The reply under judgement must not also appear as its own "earlier" context.
        turns.pop()
    elif include_output and event.output and not output_is_last:
        turns.append(Message(role="assistant", content=event.output))
    return turns


def _in_tool_loop(messages: Sequence[Message], text: str) -> bool:
    """Whether the last user message is ``text`` and the turns since are an agent's tool
    loop (a tool result follows it): the same exchange, still going, not a new question."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return (messages[index].content == text
                    and any(m.role == "tool" for m in messages[index + 1:]))
    return False


def require(value: str | None, reason: str) -> str:
    """``value`` if it has text, else skip the evaluation with ``reason`` (e.g. ``no_output``)."""
    if value is None or not value.strip():
        raise SkipEvaluation(reason)
    return value


def yes_probability(judgement: Judgement, options: Sequence[str] = YES_NO) -> float:
    """p(first option), renormalised over the two options (judges may leak other tokens)."""
    if len(options) == 2:
        # The common case, without building the whole normalised mapping: the same
        # arithmetic as ``normalise`` (so the same float), for the one value needed.
        probabilities = judgement.probabilities
        first, second = options
        yes = max(0.0, probabilities.get(first, 0.0))
        total = yes + max(0.0, probabilities.get(second, 0.0))
        if total > 0.0:
            return yes / total
    return normalise(judgement.probabilities, options)[options[0]]


def binary_score(
    p_good: float,
    *,
    threshold: float,
    labels: tuple[str, str] | None = None,
    probability_names: tuple[str, str] = ("yes", "no"),
    judgement: Judgement | None = None,
    details: Mapping[str, object] | None = None,
) -> Score:
    """A ``Score`` for a yes/no question where ``p_good`` is the probability of the good answer.

    Args:
        p_good: Probability of the desirable outcome.
        threshold: ``passed`` when ``p_good >= threshold``.
        labels: (label when passed, label when failed); default ``"nn% yes"`` of ``p_good``.
        probability_names: Names of (good, bad) in ``probabilities``.
        judgement: Where the judge info comes from.
        details: Evaluator-specific extras.
    """
    p_good = min(1.0, max(0.0, p_good))
    passed = p_good >= threshold
    if labels is not None:
        label = labels[0] if passed else labels[1]
    else:
        label = f"{round(p_good * 100)}% yes"
    good, bad = probability_names
    return Score(
        score=p_good,
        label=label,
        passed=passed,
        threshold=threshold,
        confidence=binary_confidence(p_good),
        probabilities={good: p_good, bad: 1.0 - p_good},
        details=dict(details) if details else {},
        judge=judgement.info if judgement is not None else None,
    )


#: Where a single-text evaluator (sentiment, frustration, toxicity...) reads its text.
TextSource = Literal["input", "output", "user_turns", "conversation"]


def text_of(event: TraceEvent, source: TextSource, params: TextParams) -> str:
    """The text ``source`` names, clipped; skips with ``no_<source>`` when it is empty.

    ``user_turns`` joins the user's messages (earlier ones and the input) one per line;
    ``conversation`` renders every turn as ``role: text``.
    """
    if source == "input":
        return clip(require(event.input, "no_input"), params.max_chars)
    if source == "output":
        return clip(require(event.output, "no_output"), params.max_chars)
    turns = conversation_of(event)
    if source == "user_turns":
        turns = [m for m in turns if m.role == "user"]
        text = "\n".join(" ".join(m.content.split()) for m in turns[-params.max_turns:])
        return clip(require(text, "no_input"), params.max_chars)
    return require(render_turns(turns, max_chars=params.max_chars, max_turns=params.max_turns),
                   "no_conversation")


