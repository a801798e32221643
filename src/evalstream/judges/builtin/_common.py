"""Small helpers shared by the builtin scorers: probability shapes and text utilities."""

from __future__ import annotations

import math
import re
import unicodedata

__all__ = ["WORD_RE", "Signal", "as_read", "binary", "logistic", "scale", "signals_in",
           "words"]

WORD_RE = re.compile(r"[a-z0-9']+")

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
    return WORD_RE.findall(text.lower())


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


# Invisible format characters (Unicode 15 category Cf: soft hyphen, zero-width, bidi
# controls, word joiners, tags...): a reader, and a model, skips them, so "ig<ZWSP>nore"
# still reads "ignore" while defeating a pattern. Those above U+FFFF have their own regex,
# run only on text that has such characters (a class with them is ~4x slower to scan).
_INVISIBLE = re.compile(
    "[\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")
_INVISIBLE_ASTRAL = re.compile(
    "[\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def as_read(text: str) -> str:
    """``text`` as a reader sees it: compatibility forms folded (fullwidth letters, odd
    spaces: NFKC) and invisible characters dropped, so obfuscation cannot hide a word."""
    if text.isascii():
        return text
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", text))
    # Any character above U+FFFF takes two UTF-16 units (a C-speed test, unlike max()).
    if len(text.encode("utf-16-le", "surrogatepass")) != 2 * len(text):
        text = _INVISIBLE_ASTRAL.sub("", text)
    return text
