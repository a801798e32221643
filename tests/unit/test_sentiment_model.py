"""The shipped sentiment model: loads, scores like its training script, excludes eval items."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from importlib import resources
from pathlib import Path
from types import ModuleType

import pytest

from evalstream.judges.builtin.sentiment import LABELS, dense_features, score_sentiment
from evalstream.judges.builtin.sentiment_model import (
    MODEL_FILE,
    SentimentModel,
    featurize,
    load_model,
    normalise,
)

ROOT = Path(__file__).resolve().parents[2]


def _train_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_sentiment",
                                                  ROOT / "tools" / "train_sentiment.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_shipped_model_loads_and_is_compact() -> None:
    blob = resources.files("evalstream.judges.builtin").joinpath("data", MODEL_FILE)
    assert len(blob.read_bytes()) < 2_000_000
    model = load_model()
    assert model.labels == LABELS
    assert len(model.dense_weights) == len(dense_features("ok"))
    assert len(model.words) > 1000
    assert len(model.chars) > 1000
    meta = json.loads(gzip.decompress(blob.read_bytes()))["meta"]
    assert "excluded" in meta
    assert meta["dev_macro_f1"] > 0.6


@pytest.mark.parametrize("text", ["", "   ", "ok", "🙂🙂🙂", "@user http://x.co #Tag " * 30])
def test_predict_returns_a_distribution(text: str) -> None:
    probs, rationale = score_sentiment(text)
    assert list(probs) == list(LABELS)
    assert all(0.0 <= p <= 1.0 for p in probs.values())
    assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-9)
    assert rationale.startswith(max(probs, key=lambda k: probs[k]) + ": linear model")


@pytest.mark.parametrize(("text", "label"), [
    ("I love this, it's wonderful! So happy today :)", "positive"),
    ("Congrats to the team, what an amazing win! #proud", "positive"),
    ("This is awful and I hate it. Worst service ever.", "negative"),
    ("@user you are a liar and a disgrace, shame on you", "negative"),
    ("Where is the nearest train station?", "neutral"),
])
def test_clear_examples(text: str, label: str) -> None:
    probs, _ = score_sentiment(text)
    assert max(probs, key=lambda k: probs[k]) == label
    assert probs[label] > 0.5


def test_negation_changes_the_features() -> None:
    words, _ = featurize("this is not good, but fine")
    assert "good_NEG" in words
    assert "good" not in words
    assert "fine" in words


def test_normalise_replaces_handles_urls_and_splits_hashtags() -> None:
    assert normalise("@Bob see https://t.co/x #ThankYouObama sooooo") == (
        "@user see http #thankyouobama thank you obama soo")


def test_inference_arithmetic() -> None:
    # Three distinct word features ("a", "b", "a b") and three character trigrams, one of
    # each known: each block scales by 1/sqrt(distinct n-grams, known or not).
    model = SentimentModel(labels=LABELS, words={"a": [1000, 0, -1000]},
                           chars={" a ": [0, 2000, 0]}, scale=1000.0,
                           dense_weights=((0.5, 0.0, 0.0),), bias=(0.1, 0.0, 0.0),
                           char_range=(3, 3))
    words, chars = featurize("a b", (3, 3))
    assert words == {"a", "b", "a b"}
    assert chars == {" a ", "a b", " b "}
    logits = model.logits("a b", [2.0])
    assert logits == pytest.approx([0.1 + 1 / math.sqrt(3) + 1.0, 2 / math.sqrt(3),
                                    -1 / math.sqrt(3)])


def _write_evaldata(root: Path, texts: list[str], labels: list[int],
                    dev: dict[int, str], test: dict[int, str]) -> None:
    raw = root / "raw" / "tweeteval"
    raw.mkdir(parents=True)
    (raw / "sentiment_mapping.txt").write_text("0\tnegative\n1\tneutral\n2\tpositive\n")
    (raw / "sentiment_test_text.txt.gz").write_bytes(gzip.compress(
        ("\n".join(texts) + "\n").encode()))
    (raw / "sentiment_test_labels.txt").write_text("\n".join(map(str, labels)) + "\n")
    for split, items in (("dev", dev), ("test", test)):
        (root / split).mkdir()
        lines = [json.dumps({"id": f"tweeteval-sentiment-test-{i:05d}", "input": t,
                             "label": "neutral"}) for i, t in items.items()]
        (root / split / "sentiment.jsonl").write_text("\n".join(lines) + "\n")


def test_training_pool_excludes_every_evaluation_tweet(tmp_path: Path) -> None:
    texts = ["good day @user ", "bad day", "meh day", "Bad   DAY!!", "great http://a.b/c",
             "another one"]
    _write_evaldata(tmp_path, texts, [2, 0, 1, 0, 2, 1],
                    dev={1: "bad day"}, test={4: "great http://t.co/zz"})
    pool_x, pool_y, stats = _train_script().load_pool(tmp_path)
    # Line 1 and 4 by line number; line 3 is the same tweet as line 1 up to case, spaces
    # and punctuation, so it goes too.
    assert pool_x == ["good day @user", "meh day", "another one"]
    assert pool_y == ["positive", "neutral", "neutral"]
    assert stats["excluded_by_line"] == 2
    assert stats["excluded_by_text"] == 1
