"""Template "generation" for the builtin judge: reasons, role extraction, summaries.

No language model: a reason is the scorer's own rationale, a role is split out of the
system prompt by sentence patterns, a summary is the opening request and the latest turns
with personal data scrubbed.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["extract_role", "scrub_pii", "summarise"]

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_ROLE = re.compile(r"^\s*(?:you\s+are|you're|act\s+as|your\s+role\s+is|as)\s+(.+)$", re.I)
_BEHAVIOUR = re.compile(
    r"\b(?:must|never|always|only|do\s+not|don't|should|shall|avoid|refuse|decline|reply|"
    r"respond|answer|use|keep|may|cannot|can't|no\s+more\s+than|wrap|end\s+every)\b", re.I)

_PII: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+"), "[email]"),
    (re.compile(r"https?://\S+"), "[url]"),
    (re.compile(r"\b\d(?:[ -]?\d){12,18}\b"), "[card]"),
    (re.compile(r"\+?\d[\d ().-]{7,}\d"), "[phone]"),
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), "[ssn]"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), "[ip]"),
)
_TURN = re.compile(r"^\s*(user|assistant|human|ai|bot|system)\s*:\s?", re.I | re.M)


def scrub_pii(text: str) -> str:
    """Replace e-mail addresses, URLs, card/phone/SSN numbers and IPs by placeholders."""
    for pattern, placeholder in _PII:
        text = pattern.sub(placeholder, text)
    return text


def extract_role(system_prompt: str) -> dict[str, Any]:
    """``{"role": ..., "behaviours": [...]}`` from a system prompt.

    The role is the first "You are ..." sentence (else the first sentence); behaviours are
    the sentences that state a rule (must, never, only, reply, ...).
    """
    sentences = [s.strip() for s in _SENTENCE.split(system_prompt) if s.strip()]
    role = ""
    for sentence in sentences:
        match = _ROLE.match(sentence)
        if match:
            role = match.group(1).rstrip(".")
            break
    if not role and sentences:
        role = sentences[0].rstrip(".")
    behaviours = [s for s in sentences if _BEHAVIOUR.search(s) and s.rstrip(".") != role]
    return {"role": role[:300], "behaviours": [b[:300] for b in behaviours[:20]]}


def summarise(conversation: str, limit: int = 400) -> str:
    """The first user request and the last turns, PII scrubbed, within ``limit`` chars."""
    marks = list(_TURN.finditer(conversation))
    turns: list[tuple[str, str]] = []
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(conversation)
        turns.append((mark.group(1).lower(), " ".join(conversation[mark.end():end].split())))
    if not turns:
        text = " ".join(conversation.split())
        return scrub_pii(text[:limit])
    first_user = next((t for r, t in turns if r in ("user", "human")), turns[0][1])
    # Scrub each piece before joining, so digits of adjacent pieces never merge into a
    # number that looks like a card.
    parts = [f"The user asked: {scrub_pii(first_user[:160])}"]
    if len(turns) > 2:
        role, last = turns[-1]
        parts.append(f"({len(turns)} turns; last, {role}: {scrub_pii(last[:160])})")
    return " ".join(parts)[:limit]
