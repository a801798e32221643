"""Version guard for the builtin judge: changed scores without a new ``VERSION`` fail.

``judges.builtin.VERSION`` is part of the result id of everything the builtin judge scores
(alone or first in a cascade), so a re-score after a change of its lexicons, patterns,
weights or thresholds is a new result downstream instead of being merged with the old
scoring. Nothing else notices a forgotten bump: this test scores a fixed set of requests
(``tests/fixtures/builtin_guard/items.jsonl``, generated texts across every task the
judge answers, and its generations) and pins a digest of the rounded answers against
``VERSION``. An upgrade of a library the scorers read (vaderSentiment's lexicon) shows
here too, and is a change of scores like any other.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import evalstream.judges.builtin as builtin
from evalstream.judges.base import YES_NO, GenerateRequest, JudgeRequest
from evalstream.judges.builtin import BuiltinJudge

ITEMS = Path(__file__).resolve().parents[1] / "fixtures" / "builtin_guard" / "items.jsonl"
#: (VERSION, digest of the items, digest of the builtin judge's rounded answers to them).
PIN = ("3", "ce58ccea7e7f75c6", "cb6bb0e8e3250b1d")
#: Decimals kept of each probability: below that, float arithmetic may differ between
#: platforms and library builds; above it, any tweak worth a version moves some item.
DECIMALS = 4


def digest(value: Any) -> str:
    """A short digest of ``value``'s canonical JSON (sorted keys, ASCII, no floats)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def fixed(p: float) -> str:
    """``p`` rounded and written with exactly ``DECIMALS`` digits: a string, so no float
    repr enters the digest, and never ``-0.0000``."""
    return f"{round(p, DECIMALS) + 0.0:.{DECIMALS}f}"


def load_items() -> list[dict[str, Any]]:
    return [json.loads(line) for line in ITEMS.read_text("utf-8").splitlines() if line]


def answers(items: list[dict[str, Any]]) -> list[Any]:
    """The builtin judge's answer to each item, by id in sorted order: the probabilities
    of a question (rounded), the text and value of a generation. Rationales are left out:
    they explain a score, rewording one changes none."""
    judge = BuiltinJudge()
    out: list[Any] = []
    for item in sorted(items, key=lambda i: str(i["id"])):
        data = tuple((str(k), str(v)) for k, v in item["data"].items())
        hints = item.get("hints", {})
        if item["kind"] == "judge":
            request = JudgeRequest(task=item["task"], instructions="", question="",
                                   options=tuple(item.get("options", YES_NO)), data=data,
                                   hints=hints)
            judgement = judge.judge_sync(request)
            out.append([item["id"], {o: fixed(p) for o, p in judgement.probabilities.items()}])
        else:
            generation = asyncio.run(judge.generate(GenerateRequest(
                task=item["task"], instructions="", data=data,
                max_tokens=item.get("max_tokens", 200), hints=hints)))
            out.append([item["id"], {"text": generation.text, "value": generation.value}])
    return out


def test_the_fixture_covers_every_builtin_task() -> None:
    items = load_items()
    assert len(items) >= 300
    assert {i["task"] for i in items if i["kind"] == "judge"} == set(builtin.TASKS)
    assert len({i["id"] for i in items}) == len(items)


def test_builtin_scores_are_pinned_to_its_version() -> None:
    version, pinned_items, pinned = PIN
    items = load_items()
    now_items = digest(items)
    now = digest(answers(items))
    current = builtin.VERSION
    if current != version:
        pytest.fail(f"judges.builtin VERSION is now {current!r}: set PIN = "
                    f"({current!r}, {now_items!r}, {now!r}) in {__name__}")
    if now_items != pinned_items:
        pytest.fail(f"{ITEMS.name} changed (regenerated with other items?): the scores are "
                    f"of other items, not other scores; if judges.builtin is unchanged, set "
                    f"PIN = ({version!r}, {now_items!r}, {now!r}) in {__name__} without a "
                    f"bump (check on the old items first)")
    if now != pinned:
        pytest.fail(
            f"builtin judge scores changed (lexicons, patterns, weights, thresholds, how "
            f"text is read, or a library they use): bump judges.builtin VERSION (now "
            f"{version!r}, in judges/builtin/judge.py) so re-scores get new result ids, then "
            f"set PIN = (<new version>, {now_items!r}, {now!r}) in {__name__}")
