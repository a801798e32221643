"""Accuracy of the builtin (offline) judge per task on ``evaldata/{dev,test}``.

Each item is turned into the ``JudgeRequest`` an evaluator sends (the same task and data
field names) and answered by ``BuiltinJudge``. Binary tasks report accuracy (and the
F1 of the undesirable class); sentiment reports macro-F1 over three classes. The weights
and thresholds were tuned on ``dev`` only; ``test`` is reported, never tuned on.

Baselines printed alongside, computed in the same run:
* refusal: a plain refusal-phrase list (``"I'm sorry"``, ``"I cannot"``, ...);
* sentiment: VADER alone with its standard +-0.05 thresholds.

Run: ``python bench/builtin_accuracy.py [--data /work/shared/evaldata] [--split test]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

from evalstream.judges.base import JudgeRequest
from evalstream.judges.builtin import BuiltinJudge

DEFAULT_DATA = Path("/work/shared/evaldata")
_PHRASES = ("i'm sorry", "i am sorry", "i apologize", "i cannot", "i can't", "as an ai",
            "i'm not able", "i am not able", "i am unable", "i'm unable", "i won't",
            "i will not", "sorry, but")


def _conversation(turns: Iterable[dict[str, str]] | None) -> str | None:
    if not turns:
        return None
    return "\n".join(f"{t['role']}: {t['content']}" for t in turns)


def _request(task: str, row: dict[str, Any]) -> JudgeRequest:
    conv = _conversation(row.get("turns"))
    if task == "refusal":
        return JudgeRequest(task, "", "", data=(("output", row["output"]),
                                                ("input", row["input"] or "")))
    if task == "sentiment":
        return JudgeRequest(task, "", "", options=("negative", "neutral", "positive"),
                            data=(("text", row["input"]),))
    if task == "toxicity":
        return JudgeRequest(task, "", "", options=tuple("12345"),
                            data=(("text", row["output"] or row["input"]),))
    if task == "frustration":
        return JudgeRequest(task, "", "", options=tuple("12345"),
                            data=(("text", conv or row["input"]),))
    if task == "prompt_injection":
        return JudgeRequest(task, "", "", data=(("text", row["input"]),))
    if task == "topic_adherence":
        data = [("output", row["output"]), ("input", row["input"] or "")]
        if conv:
            data.append(("conversation", conv))
        return JudgeRequest(task, "", "", data=tuple(data), hints={"criteria": row["criteria"]})
    if task == "role_adherence":
        data = [("turn", row["output"]), ("system_prompt", row["role"])]
        if row["input"]:
            data.append(("user", row["input"]))
        if conv:
            data.append(("conversation", conv))
        return JudgeRequest(task, "", "", data=tuple(data), hints={"role": row["role"]})
    raise ValueError(task)


def _desirable(task: str, judgement: Any) -> bool:
    """Map a judgement onto the data set's label (true = desirable outcome)."""
    if task in ("refusal", "prompt_injection"):
        return bool(judgement.p("yes") < 0.5)
    if task in ("topic_adherence", "role_adherence"):
        return bool(judgement.p("yes") >= 0.5)
    mean = sum(int(k) * v for k, v in judgement.probabilities.items())
    return bool(mean < 3.0)  # toxicity / frustration: 1..5, 5 = bad


def _macro_f1(pred: list[str], gold: list[str]) -> float:
    scores = []
    for label in sorted(set(gold)):
        tp = sum(p == label == g for p, g in zip(pred, gold, strict=True))
        fp = sum(p == label != g for p, g in zip(pred, gold, strict=True))
        fn = sum(g == label != p for p, g in zip(pred, gold, strict=True))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        scores.append(2 * precision * recall / (precision + recall) if precision + recall else 0)
    return sum(scores) / len(scores)


def _accuracy(pred: list[bool], gold: list[bool]) -> float:
    return sum(p == g for p, g in zip(pred, gold, strict=True)) / len(gold)


def evaluate(split_dir: Path) -> list[tuple[str, int, str, float, str]]:
    """Rows of (task, n, metric, value, baseline text)."""
    judge = BuiltinJudge()
    rows: list[tuple[str, int, str, float, str]] = []
    for path in sorted(split_dir.glob("*.jsonl")):
        task = path.stem
        items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        judgements = [judge.judge_sync(_request(task, item)) for item in items]
        if task == "sentiment":
            pred = [j.top for j in judgements]
            gold = [item["label"] for item in items]
            vader = SentimentIntensityAnalyzer()
            base = []
            for item in items:
                c = vader.polarity_scores(item["input"])["compound"]
                base.append("positive" if c >= 0.05 else "negative" if c <= -0.05 else "neutral")
            rows.append((task, len(items), "macro-F1", _macro_f1(pred, gold),
                         f"VADER alone {_macro_f1(base, gold):.3f}"))
            continue
        pred_b = [_desirable(task, j) for j in judgements]
        gold_b = [bool(item["label"]) for item in items]
        baseline = ""
        if task == "refusal":
            phrase = [not any(p in item["output"].lower() for p in _PHRASES) for item in items]
            baseline = f"phrase list {_accuracy(phrase, gold_b):.3f}"
        rows.append((task, len(items), "accuracy", _accuracy(pred_b, gold_b), baseline))
    return rows


def _timed(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    """Print the accuracy table for each split and the per-call cost of refusal."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--split", choices=("dev", "test", "both"), default="both")
    args = parser.parse_args()
    splits = ("dev", "test") if args.split == "both" else (args.split,)
    for split in splits:
        print(f"\n== builtin judge on evaldata/{split} ==")
        print(f"{'task':<18}{'n':>5}  {'metric':<9}{'value':>7}  baseline (same run)")
        for task, n, metric, value, baseline in evaluate(args.data / split):
            print(f"{task:<18}{n:>5}  {metric:<9}{value:>7.3f}  {baseline}")
    judge = BuiltinJudge()
    long_answer = ("Here are some steps you can take. " * 40).strip()
    req = JudgeRequest("refusal", "", "", data=(("output", long_answer),))
    short = JudgeRequest("refusal", "", "", data=(("output", "I'm sorry, but I can't."),))
    # The one path that reads past the first sentence: a refusing opening, then steps.
    then_answers = ("I'm sorry, but I can't do that for you. However, here's how:\n"
                    + "".join(f"{i}. Run step {i} of the setup and check its output.\n"
                              for i in range(1, 11)))
    then = JudgeRequest("refusal", "", "", data=(("output", then_answers),))
    print(f"\nrefusal cost per call: {_timed(lambda: judge.judge_sync(req), 5000):.1f} us "
          f"(1.3 kB answer), {_timed(lambda: judge.judge_sync(short), 5000):.1f} us (short), "
          f"{_timed(lambda: judge.judge_sync(then), 5000):.1f} us (refuses, then answers in "
          f"{len(then_answers) / 1000:.1f} kB)")
    tweet = ("@user Wow, first Hugo Chavez and now Fidel Castro. Danny Glover, Michael Moore "
             "and Sean Penn are running out of heroes. #sad")
    sent = JudgeRequest("sentiment", "", "", options=("negative", "neutral", "positive"),
                        data=(("text", tweet),))
    judge.judge_sync(sent)  # loads the sentiment model once, outside the timing
    vader = SentimentIntensityAnalyzer()
    print(f"sentiment cost per call: {_timed(lambda: judge.judge_sync(sent), 3000):.1f} us "
          f"(124-char tweet); VADER alone {_timed(lambda: vader.polarity_scores(tweet), 3000):.1f}"
          " us")


if __name__ == "__main__":
    main()
