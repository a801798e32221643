"""A small linear sentiment model (word + character n-grams + VADER scores), pure Python.

The weights are trained offline by ``tools/train_sentiment.py`` (scikit-learn, dev-only) and
shipped as gzipped JSON in ``data/sentiment_model.json.gz``; see ``data/README.md`` for their
provenance. Inference is a dictionary lookup per n-gram plus a three-way dot product, so it
needs neither numpy nor scikit-learn at run time.

The featuriser below is the single source of truth: the training script imports
:func:`featurize` from here, so training and inference cannot drift apart.
"""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["MODEL_FILE", "SentimentModel", "featurize", "load_model", "normalise"]

MODEL_FILE = "sentiment_model.json.gz"

_URL = re.compile(r"https?://\S+|www\.\S+")
_HANDLE = re.compile(r"@\w+")
_HASHTAG = re.compile(r"#(\w+)")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])")
# Three or more repeats of a letter carry emphasis ("soooo"); fold them to two so the many
# spellings share one feature.
_ELONGATED = re.compile(r"(\w)\1{2,}")
_SPACES = re.compile(r"\s+")
# Words (with inner apostrophes), runs of ! or ?, and any other single non-space symbol
# (emoji, emoticon parts), which often carry the sentiment of a tweet.
_TOKEN = re.compile(r"[a-z0-9_]+(?:'[a-z]+)?|[!?]+|[^\sa-z0-9_]")
_NEGATORS = frozenset({
    "not", "no", "never", "nothing", "nobody", "none", "neither", "nor", "cannot",
    "can't", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't", "weren't", "won't",
    "wouldn't", "shouldn't", "couldn't", "haven't", "hasn't", "hadn't", "ain't", "dont",
    "cant", "wont", "didnt", "doesnt", "isnt",
})
_CLAUSE_END = frozenset(".,;:!?")


def normalise(text: str) -> str:
    """Lower-cased tweet text with handles and URLs replaced by placeholders.

    Hashtags keep their ``#tag`` form and are followed by their split words, since much
    tweet sentiment lives in them (``#ThankYouObama`` -> ``#thankyouobama thank you obama``).
    The training script also uses this to match tweets against the evaluation sets.
    """
    text = _URL.sub(" http ", text)
    text = _HANDLE.sub(" @user ", text)
    text = _HASHTAG.sub(lambda m: f" #{m.group(1)} {_CAMEL.sub(' ', m.group(1))} ", text)
    text = _ELONGATED.sub(r"\1\1", text.lower())
    return _SPACES.sub(" ", text).strip()


def _word_features(norm: str) -> set[str]:
    tokens = _TOKEN.findall(norm)
    # Mark words after a negator up to the end of the clause ("not good" -> "good_NEG"),
    # the usual cheap way for a bag of words to see negation.
    marked: list[str] = []
    negated = False
    for tok in tokens:
        if tok[0] in _CLAUSE_END:
            negated = False
            marked.append(tok)
        elif tok in _NEGATORS:
            negated = True
            marked.append(tok)
        else:
            marked.append(tok + "_NEG" if negated else tok)
    # Unigrams never contain a space and bigrams always do, so one namespace holds both.
    feats = set(marked)
    feats.update(a + " " + b for a, b in itertools.pairwise(marked))
    return feats


def _char_features(norm: str, low: int, high: int) -> set[str]:
    padded = f" {norm} "
    size = len(padded)
    return {padded[i:i + n] for n in range(low, high + 1) for i in range(size - n + 1)}


def featurize(text: str, char_range: tuple[int, int] = (2, 5)) -> tuple[set[str], set[str]]:
    """The distinct word/bigram features and character n-grams of one text.

    Args:
        text: Raw text (a tweet, a user message...).
        char_range: Smallest and largest character n-gram length.

    Returns:
        (distinct words and word bigrams, distinct character n-grams); the model uses
        presence only.
    """
    norm = normalise(text)
    return _word_features(norm), _char_features(norm, *char_range)


def _block(feats: set[str], weights: dict[str, list[int]], scale: float, acc: list[float]) -> None:
    # Presence features scaled by 1/sqrt(distinct n-grams in the text) (an L2-normalised
    # block, exactly as the training script builds it), so long texts do not dominate. The
    # count includes n-grams the model does not know, so pruned features change nothing.
    if not feats:
        return
    # Iterate over the text's few hundred n-grams, never over the model's vocabulary; the
    # lookups and column sums run in C.
    rows = [row for row in map(weights.get, feats) if row is not None]
    if not rows:
        return
    factor = scale / math.sqrt(len(feats))
    for k, column in enumerate(zip(*rows, strict=True)):
        acc[k] += sum(column) * factor


@dataclass(frozen=True)
class SentimentModel:
    """Multinomial logistic regression over sparse n-gram and dense VADER features.

    Attributes:
        labels: Class names in weight order.
        words: Word or word bigram -> integer weights, one per class (times ``1/scale``).
        chars: Character n-gram -> integer weights, one per class (times ``1/scale``).
        scale: Quantisation factor of the integer weights.
        dense_weights: One row of per-class weights per dense (VADER) feature.
        bias: Per-class intercept.
        char_range: Character n-gram lengths used in training.
        lexicon_weight: Weight of the lexicon rule's logits added by the caller
            (``sentiment.lexicon_logits``), chosen on dev; 0 means the model alone.
    """

    labels: tuple[str, ...]
    words: dict[str, list[int]]
    chars: dict[str, list[int]]
    scale: float
    dense_weights: tuple[tuple[float, ...], ...]
    bias: tuple[float, ...]
    char_range: tuple[int, int]
    lexicon_weight: float = 0.0

    def logits(self, text: str, dense: Sequence[float]) -> list[float]:
        """Per-class scores before the softmax.

        Args:
            text: The text to classify.
            dense: The dense features, in training order (``dense_features`` in
                ``sentiment.py``).
        """
        acc = list(self.bias)
        words, chars = featurize(text, self.char_range)
        _block(words, self.words, 1.0 / self.scale, acc)
        _block(chars, self.chars, 1.0 / self.scale, acc)
        for value, row in zip(dense, self.dense_weights, strict=True):
            for k, w in enumerate(row):
                acc[k] += w * value
        return acc

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SentimentModel:
        """Build a model from the shipped JSON document (see ``tools/train_sentiment.py``).

        The integer weight lists are used as parsed (no per-entry conversion), which keeps
        loading fast.
        """
        return cls(
            labels=tuple(raw["labels"]),
            words=raw["words"],
            chars=raw["chars"],
            scale=float(raw["scale"]),
            dense_weights=tuple(tuple(float(v) for v in row) for row in raw["dense_weights"]),
            bias=tuple(float(v) for v in raw["bias"]),
            char_range=(int(raw["char_range"][0]), int(raw["char_range"][1])),
            lexicon_weight=float(raw.get("lexicon_weight", 0.0)),
        )


@cache
def load_model() -> SentimentModel:
    """The shipped model, loaded once per process and cached."""
    data = resources.files("evalstream.judges.builtin").joinpath("data", MODEL_FILE)
    raw = json.loads(gzip.decompress(data.read_bytes()).decode("utf-8"))
    return SentimentModel.from_json(raw)
