"""The refusal scorer's one-pass gate finds exactly the literals an ``in`` test finds."""

from __future__ import annotations

import pytest

from evalstream.judges.builtin import refusal


@pytest.mark.parametrize("body", [
    "i am not able to help",  # overlapping gates: "not able" and "able to"
    "you cannot, you can not, you can't, cantaloupe",
    "1) first\n**bold** step 1. here",
    "nothing relevant at all",
    "\u0131 \u00e9 instead of the guidelines; violates nothing",
    "",
])
def test_gate_literals_found_in_one_pass_equal_substring_tests(body: str) -> None:
    found = {i for i, _, _ in
             refusal._GATE_FINDER.find_matches_as_indexes(body, overlapping=True)}
    expected = {i for i, lit in enumerate(refusal._GATE_LITERALS) if lit in body}
    assert found == expected


def test_overlapping_gates_both_open() -> None:
    # "not able" (gate of 'I cannot provide') and "able to" (gate of 'not allowed to')
    # overlap; both patterns must get their chance, as with one ``in`` per literal.
    _, why = refusal.score_refusal("Sorry. We are not able to provide that; I am not able to "
                                   "help with it.")
    assert "'not allowed to'" in why


@pytest.mark.parametrize(("text", "marker"), [
    ("This request  should\tnot be answered.", "says it should not be"),
    ("Such a thing is not really appropriate.", "says it is not appropriate"),
    ("To do this well, you first need a plan.", "opens with 'to do X, ...'"),
    ("one two three four five six seven should not be", None),  # 7 words: too far
])
def test_possessive_openings_match_as_before(text: str, marker: str | None) -> None:
    _, why = refusal.score_refusal(text)
    if marker is None:
        assert "should not be" not in why
    else:
        assert marker in why
