"""Small helpers shared by the builtin scorers: probability shapes and text utilities."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

from evalstream.judges.invisible import FORMAT_ASTRAL, FORMAT_BMP, has_astral

_T = TypeVar("_T")


def cache_short(max_chars: int, maxsize: int) -> Callable[[Callable[[str], _T]],
                                                          Callable[[str], _T]]:
    """Cache a function of one text, for texts up to ``max_chars`` only.

    Config texts (scopes, criteria, role templates) are short and repeat on every event;
    event texts (outputs, system prompts with retrieved documents) are long and unique, and
    a cache keyed by them would hold ``maxsize`` whole texts of up to
    ``worker.max_message_bytes`` each, for nothing.
    """
    def wrap(fn: Callable[[str], _T]) -> Callable[[str], _T]:
        cached = lru_cache(maxsize=maxsize)(fn)

        def call(text: str) -> _T:
            return fn(text) if len(text) > max_chars else cached(text)

        call.__doc__, call.__name__ = fn.__doc__, fn.__name__
        return call

    return wrap

__all__ = ["Signal", "as_read", "binary", "cache_short", "logistic", "scale", "signals_in",
           "words"]

_WORD_RE = re.compile(r"[a-z0-9']+")

#: A weighted cue: (pattern, weight added to the log-odds when it matches, name for rationales).
Signal = tuple[re.Pattern[str], float, str]


def logistic(x: float) -> float:
    """The logistic function, safe for large magnitudes."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def binary(p_yes: float) -> dict[str, float]:
    """A yes/no distribution, clamped away from exact 0/1 (a heuristic is never certain)."""
    p = min(0.99, max(0.01, p_yes))
    return {"yes": p, "no": 1.0 - p}


def scale(severity: float) -> dict[str, float]:
    """A 1..5 distribution centred on ``severity`` (a real number in [1, 5]).

    The mass sits on the two nearest points so the probability-weighted mean equals the
    severity exactly (``scoring.scale_mean`` recovers it).
    """
    s = min(5.0, max(1.0, severity))
    low = min(4, math.floor(s))
    frac = s - low
    probs = {str(i): 0.0 for i in range(1, 6)}
    probs[str(low)] = 1.0 - frac
    probs[str(low + 1)] += frac
    return probs


def words(text: str) -> list[str]:
    """Lower-cased word tokens."""
    return _WORD_RE.findall(text.lower())


def signals_in(text: str, signals: tuple[Signal, ...],
               start: float = 0.0) -> tuple[float, list[str]]:
    """``start`` plus the weights of the signals whose pattern occurs in ``text`` (added in
    order), and their names."""
    total = start
    hits: list[str] = []
    for pattern, weight, name in signals:
        if pattern.search(text):
            total += weight
            hits.append(name)
    return total, hits


# Dropped by ``as_read``. The class above U+FFFF runs only on text that has such characters.
_INVISIBLE = re.compile(f"[{FORMAT_BMP}]")
_INVISIBLE_ASTRAL = re.compile(f"[{FORMAT_ASTRAL}]")


def as_read(text: str) -> str:
    """``text`` as a reader sees it: compatibility forms folded (fullwidth letters, odd
    spaces: NFKC) and invisible characters dropped, so obfuscation cannot hide a word."""
    if text.isascii():
        return text
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    if has_astral(text):
        text = _INVISIBLE_ASTRAL.sub("", text)
    return text
