"""Strict parsing of JSON answers (used when a backend gives no logprobs)."""

from __future__ import annotations

import json
from typing import Any

from evalstream.errors import JudgeError
from evalstream.judges.logprobs import fold

__all__ = ["parse_json_answer", "unfence"]


class _RepeatedKeyError(ValueError):
    """A JSON object names a key twice."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object from its pairs; a key named twice is refused, not silently the last."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _RepeatedKeyError
    return obj


def parse_json_answer(content: str, options: tuple[str, ...]) -> str:
    """The option named by a strict ``{"output": ...}`` answer.

    Raises:
        JudgeError: not exactly a JSON object with one key ``output`` naming an option. An
            object naming ``output`` twice is refused too: ``json`` would keep the last
            one, which may be a verdict echoed from the content after the model's own.
    """
    text = unfence(content)
    try:
        obj = json.loads(text, object_pairs_hook=_pairs)
    except _RepeatedKeyError:
        raise JudgeError(f'judge answer must be exactly {{"output": ...}}, got a key twice '
                         f"in {text[:60]!r}") from None
    except ValueError:
        raise JudgeError(f'judge answer is not JSON {{"output": ...}}: {text[:60]!r}') from None
    if not isinstance(obj, dict) or set(obj) != {"output"}:
        raise JudgeError(f'judge answer must be exactly {{"output": ...}}, got {text[:60]!r}')
    value = obj["output"]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise JudgeError(f"judge answer 'output' must be one of {list(options)}, got {value!r}")
    folded = {fold(o): o for o in options}
    option = folded.get(fold(str(value)))
    if option is None:
        raise JudgeError(f"judge answered {str(value)[:40]!r}, not one of {list(options)}")
    return option


def unfence(content: str) -> str:
    """Strip surrounding whitespace and one Markdown code fence (```json ... ```)."""
    text = content.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        text = text[3:-3]
        first_newline = text.find("\n")
        if first_newline != -1 and text[:first_newline].strip().isalpha():
            text = text[first_newline + 1:]
    return text.strip()
