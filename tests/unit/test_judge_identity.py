"""A judge's identity in result ids: what makes it score as it does, and nothing else.

An option that can give the same event a different score re-scores under new result ids
(downstream de-duplication by ``result_id`` would otherwise merge two scorings); one that
only changes how the judge is reached, paced or paid for keeps them. Options at their
defaults add nothing, so the ids published before they were part of the identity stay.
"""

from __future__ import annotations

import pytest

from tests.unit.test_result_versions import CASCADE, LLM, score, spec

JUDGES = {"llm": LLM, "cheap-first": CASCADE}


async def test_ids_with_default_judge_options_are_unchanged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Computed by the code before the scoring options were part of the judge's identity
    # (9ca10eb6): with default options an upgrade must not change any id, or downstream
    # would keep a redelivered event's score twice (the old id and the new one).
    monkeypatch.setattr("evalstream.judges.builtin.VERSION", "2")
    llm, cascade = await score(spec(name="l", judge="llm"), spec(name="c", judge="cheap-first"),
                               judges=JUDGES)
    assert llm.result_id == "f2d4c48afb95cf83ed139f8ffe560be9"
    assert cascade.result_id == "0a37142777446aaafce2ee71cff8348c"
    # The defaults written out are the defaults.
    explicit = {**LLM, "logprobs": "auto", "top_logprobs": 10}
    (written,) = await score(spec(name="l", judge="llm"), judges={"llm": explicit})
    assert written.result_id == llm.result_id
