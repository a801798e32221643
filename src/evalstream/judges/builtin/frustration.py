"""Frustration: 1 (content) .. 5 (very frustrated), from the user's latest turn in context.

The text may be the user's turns alone or the whole conversation as ``role: content``
lines. The latest user turn is scored; the turns before it add context:

* corrections and rejections ("No, I said...", "that won't work", "instead", "actually");
* complaints and exasperation ("not helping", "useless", "again", "?!", shouting);
* the assistant's previous turn failed ("sorry, there are no...", "unfortunately");
* the user repeats an earlier request almost word for word;
* satisfaction ("great", "perfect", "thanks") pulls the score down.

Weights were set on ``evaldata/dev`` (USS satisfaction ratings as a proxy).
"""

from __future__ import annotations

import re

from evalstream.judges.builtin._common import Signal, logistic, scale, signals_in, words
from evalstream.judges.builtin.sentiment import sentiment_compound

__all__ = ["frustration_probability", "score_frustration", "split_turns"]

_ROLE_LINE = re.compile(r"^\s*(user|assistant|human|ai|bot|system)\s*:\s?", re.I | re.M)

_SIGNALS: tuple[Signal, ...] = tuple(
    (re.compile(p, re.I), w, name)
    for p, w, name in (
        (r"^\W*no\b(?!\s*,?\s*(?:thanks?|thank\s+you)\b(?!.*\b(?:but|need|want)\b))", 1.3,
         "rejects"),
        (r"^\W*no\s*,?\s*thanks?|^\W*no\s*,?\s*thank\s+you", 0.6, "declines"),
        (r"\b(?:instead|actually|rather|i\s+said|i\s+told\s+you|already|again|still)\b", 0.9,
         "corrects"),
        (r"\b(?:won'?t|doesn'?t|does\s+not|will\s+not|isn'?t|not)\s+(?:work|help|right|"
         r"what\s+i|good|enough|correct|possible)", 1.2, "not working"),
        (r"\btoo\s+(?:early|late|expensive|far|long|much|many|small|big|soon)\b", 1.1,
         "constraint unmet"),
        (r"\b(?:anything|something|any\s+\w+|other|another)\s+(?:else|other)\b|"
         r"\bany\s+other\b|\bsomething\s+else\b", 0.8, "asks for alternatives"),
        (r"\b(?:useless|ridiculous|frustrat\w*|annoy\w*|terrible|awful|waste|stupid|"
         r"not\s+(?:really\s+)?helping|don'?t\s+understand|makes\s+no\s+sense|forget\s+it|"
         r"never\s+mind|nevermind|boring|hate|ugh|come\s+on)\b", 2.0, "complains"),
        (r"^\W*(?:i'?m\s+)?sorry\b", 0.7, "apologises (repair)"),
        (r"^\W*(?:fine|ok(?:ay)?|whatever)\s*[,.]", 0.7, "grudging"),
        (r"\?\s*!|!\s*\?|!!", 0.8, "exasperated punctuation"),
        (r"\b(?:great|perfect|excellent|wonderful|awesome|sounds\s+good|that\s+works|"
         r"thanks?\s+(?:a\s+lot|so\s+much)|good\s+job|helpful|that'?s\s+(?:all|everything)|"
         r"sounds\s+(?:great|nice|perfect)|yes\b)", -1.6, "satisfied"),
        (r"\b(?:i\s+(?:need|want|would\s+like|'d\s+like)|can\s+you|could\s+you)\b", -0.4,
         "new request"),
    )
)
_FAILED_ASSISTANT = re.compile(
    r"\b(?:sorry|unfortunately|unable|couldn'?t|could\s+not|can'?t|cannot|no\s+(?:results|"
    r"\w+\s+(?:available|found))|not\s+available|there\s+(?:are|is)\s+no|none|fully\s+booked|"
    r"failed|didn'?t\s+find)\b", re.I)

_BIAS = -0.05


def split_turns(text: str) -> list[tuple[str, str]]:
    """Split ``role: content`` lines into turns; plain text is one user turn."""
    marks = list(_ROLE_LINE.finditer(text))
    if not marks:
        return [("user", text.strip())]
    turns: list[tuple[str, str]] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        role = mark.group(1).lower()
        role = "user" if role in ("user", "human") else "assistant"
        turns.append((role, text[mark.end():end].strip()))
    return turns


def _overlap(a: str, b: str) -> float:
    wa, wb = set(words(a)), set(words(b))
    if len(wa) < 4 or len(wb) < 4:
        return 0.0
    return len(wa & wb) / min(len(wa), len(wb))


def frustration_probability(text: str) -> tuple[float, list[str]]:
    """Probability that the user (latest user turn) is frustrated, and why."""
    turns = split_turns(text)
    user_idx = [i for i, (role, _) in enumerate(turns) if role == "user"]
    if not user_idx:
        return 0.2, ["no user turn"]
    last = user_idx[-1]
    current = turns[last][1]
    total, hits = signals_in(current, _SIGNALS, _BIAS)
    if last > 0 and turns[last - 1][0] == "assistant" and _FAILED_ASSISTANT.search(
            turns[last - 1][1]):
        total += 0.8
        hits.append("assistant just failed")
    if any(_overlap(current, turns[i][1]) > 0.7 for i in user_idx[:-1]):
        total += 1.0
        hits.append("repeats an earlier request")
    compound = sentiment_compound(current)
    if compound < -0.2:
        total += 1.2 * -compound
        hits.append(f"negative tone ({compound:+.2f})")
    letters = [c for c in current if c.isalpha()]
    if len(letters) > 12 and sum(c.isupper() for c in letters) / len(letters) > 0.7:
        total += 1.0
        hits.append("shouting")
    return logistic(total), hits


def score_frustration(text: str) -> tuple[dict[str, float], str]:
    """A 1..5 distribution (5 = very frustrated) whose mean is ``1 + 4 * p(frustrated)``."""
    p, hits = frustration_probability(text)
    why = ", ".join(hits) if hits else "no sign of frustration"
    return scale(1.0 + 4.0 * p), f"p(frustrated)={p:.2f}: {why}"
