"""Read the first generated token's distribution from any OpenAI-compatible response.

Shapes handled (all found in the wild, all reproduced by ``tests/support/llm_server.py``):

* OpenAI / vLLM / llama.cpp chat completions:
  ``choices[0].logprobs.content[0].top_logprobs = [{"token", "logprob", "bytes"}]``;
* OpenAI / vLLM legacy completions:
  ``choices[0].logprobs.top_logprobs[0] = {token: logprob}``;
* llama.cpp native ``/completion`` (current):
  ``completion_probabilities[0].top_logprobs = [{"id", "token", "logprob", "bytes"}]``
  (``top_probs`` with ``prob`` when ``post_sampling_probs`` is set);
* llama.cpp native ``/completion`` (older builds):
  ``completion_probabilities[0].probs = [{"tok_str", "prob"}]``.

Token strings are folded (whitespace and SentencePiece/BPE space markers stripped, case
folded, trailing punctuation dropped) so "Yes", " yes", "YES" and "▁yes" count as one
option; their probability mass is summed, then renormalised over the options.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalstream.errors import JudgeError

__all__ = [
    "MissingLogprobsError",
    "OptionsNotFoundError",
    "first_token_distinguishable",
    "first_token_distribution",
    "fold",
    "option_probabilities",
]

_MARKERS = "\u2581\u0120"  # "▁" (SentencePiece) and "Ġ" (byte-level BPE) word-start marks
_PUNCT = " \t\r\n.,:;!?\"'`*()[]{}"
# One run of letters, or one run of digits: the options that plausibly are one token.
_ONE_WORD = re.compile(r"[^\W\d_]+|\d+")


class MissingLogprobsError(JudgeError):
    """The response carries no token probabilities (the backend does not support them)."""


class OptionsNotFoundError(JudgeError):
    """None of the answer options is among the returned top tokens."""


def fold(token: str) -> str:
    """Normalise a token or option for matching: " Yes." -> "yes"."""
    return token.strip().lstrip(_MARKERS).strip(_PUNCT).casefold()


def first_token_distinguishable(options: Sequence[str]) -> bool:
    """Whether the first generated token can tell ``options`` apart.

    Only the first token is read, so a label spanning several tokens is judged by its
    first one: "account_security" then counts for "account", and "billing_refund" vs
    "billing_invoice" match nothing at all. Without the model's tokenizer this is a
    conservative guess: every option must be one run of letters or of digits, and none
    may be a prefix of another ("account"/"accounting", "1"/"10" share a first token).
    When it says no, the question is better asked for a JSON answer.
    """
    folded = [fold(o) for o in options]
    if not all(_ONE_WORD.fullmatch(f) for f in folded):
        return False
    return not any(a != b and b.startswith(a) for a in folded for b in folded)


def _as_float(value: Any) -> float | None:
    """A finite number, else None (NaN and infinities are ignored, never propagated)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


#: Rounding can leave a certain token's logprob a hair above 0 (its probability above 1);
#: more than this is a corrupt response.
_LOGPROB_NOISE = 1e-4


def _from_logprob(value: Any) -> float | None:
    """A probability from a logprob (rounding noise above 0 clamped to 0).

    Raises:
        ValueError: a logprob clearly above 0, which no distribution has: the response is
            corrupt, and reading it (clamped, say) would turn ``yes +50, no +49`` into a
            confident-looking 50/50 that passes.
    """
    logprob = _as_float(value)
    if logprob is None:
        return None
    if logprob > _LOGPROB_NOISE:
        raise ValueError(f"logprob {logprob:g} is above 0")
    return math.exp(min(logprob, 0.0))


def _from_prob(value: Any) -> float | None:
    """A probability (rounding noise above 1 clamped to 1; negative ones ignored).

    Raises:
        ValueError: a probability clearly above 1: the response is corrupt (see
            ``_from_logprob``).
    """
    prob = _as_float(value)
    if prob is None or prob < 0:
        return None
    if prob > 1.0 + _LOGPROB_NOISE:
        raise ValueError(f"probability {prob:g} is above 1")
    return min(prob, 1.0)


def _from_entries(entries: Iterable[Any], token_keys: Sequence[str]) -> dict[str, float]:
    """[{token, logprob|prob}] -> {token: probability} (mass of duplicate tokens summed)."""
    out: dict[str, float] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        token = next((entry[k] for k in token_keys if isinstance(entry.get(k), str)), None)
        if token is None:
            continue
        prob = _from_logprob(entry.get("logprob"))
        if prob is None:
            prob = _from_prob(entry.get("prob"))
        if prob is None:
            continue
        out[token] = out.get(token, 0.0) + prob
    return out


def first_token_distribution(body: Any) -> dict[str, float]:
    """The top tokens of the first generated position and their probabilities.

    Raises:
        MissingLogprobsError: the body is a valid response without any probability data.
        ValueError: a logprob above 0 or a probability above 1 (a corrupt response).
    """
    if not isinstance(body, Mapping):
        raise MissingLogprobsError("response is not a JSON object")
    rows = body.get("completion_probabilities")
    if isinstance(rows, list):  # llama.cpp native /completion
        if rows and isinstance(rows[0], Mapping):
            first = rows[0]
            for key in ("top_logprobs", "top_probs", "probs"):
                if isinstance(first.get(key), list):
                    dist = _from_entries(first[key], ("token", "tok_str"))
                    if dist:
                        return dist
        raise MissingLogprobsError("completion_probabilities is empty")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise MissingLogprobsError("response has no choices")
    logprobs = choices[0].get("logprobs")
    if not isinstance(logprobs, Mapping):
        raise MissingLogprobsError("choices[0].logprobs is missing")
    content = logprobs.get("content")
    if isinstance(content, list):  # chat completions
        if content and isinstance(content[0], Mapping):
            top = content[0].get("top_logprobs")
            if isinstance(top, list):
                dist = _from_entries(top, ("token",))
                if dist:
                    return dist
            # top_logprobs not returned: fall back to the chosen token alone.
            dist = _from_entries(content[:1], ("token",))
            if dist:
                return dist
        raise MissingLogprobsError("choices[0].logprobs.content is empty")
    top_legacy = logprobs.get("top_logprobs")
    if isinstance(top_legacy, list) and top_legacy and isinstance(top_legacy[0], Mapping):
        dist = {}
        for token, lp in top_legacy[0].items():
            prob = _from_logprob(lp)
            if isinstance(token, str) and prob is not None:
                dist[token] = dist.get(token, 0.0) + prob
        if dist:
            return dist
    raise MissingLogprobsError("choices[0].logprobs has no top_logprobs")


def option_probabilities(distribution: Mapping[str, float], options: Sequence[str], *,
                         min_mass: float = 0.0) -> dict[str, float]:
    """Sum the mass of tokens folding to each option and renormalise over the options.

    Args:
        distribution: The first generated token's top tokens and their probabilities.
        options: The answer options.
        min_mass: The least probability the options must carry together. Renormalised,
            a residue reads as a verdict: a model that begins its reply with something
            else ("Verdict", "{", an echo of the content it was told to ignore) at 0.97
            with "yes" at 0.02 and "no" at 0.01 would score a confident-looking 0.67.

    Raises:
        OptionsNotFoundError: none of the options is among the top tokens, or they carry
            less than ``min_mass`` (never a silent default).
    """
    folded = {fold(o): o for o in options}
    mass = dict.fromkeys(options, 0.0)
    for token, prob in distribution.items():
        option = folded.get(fold(token))
        # Non-finite masses are skipped (a distribution not built by this module).
        if option is not None and 0.0 < prob < math.inf:
            mass[option] += prob
    total = sum(mass.values())
    if total <= 0.0 or total < min_mass:
        top = sorted(distribution.items(), key=lambda kv: -kv[1])[:5]
        shown = ", ".join(f"{t[:12]!r}" for t, _ in top)
        found = (f"none of the answer options {list(options)} is among the judge's top "
                 "tokens" if total <= 0.0 else
                 f"the answer options {list(options)} carry only {total:.1%} of the judge's "
                 f"first token, below min_option_mass {min_mass:g}")
        raise OptionsNotFoundError(f"{found} (top: {shown})", retryable=False)
    return {o: m / total for o, m in mass.items()}
