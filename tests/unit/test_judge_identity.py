"""A judge's identity in result ids: what makes it score as it does, and nothing else.

An option that can give the same event a different score re-scores under new result ids
(downstream de-duplication by ``result_id`` would otherwise merge two scorings); one that
only changes how the judge is reached, paced or paid for keeps them. Options at their
defaults add nothing, so the ids published before they were part of the identity stay.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from evalstream.config.judges import CascadeJudgeConfig, OpenAIJudgeConfig, judge_identity
from evalstream.errors import JudgeError
from tests.support.llm_server import llm_server
from tests.unit.test_judge_openai import make_judge, question
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


def identity(name: str = "llm", /, **options: Any) -> Any:
    """``judge_identity`` of ``name`` among an LLM judge with ``options`` and a cascade
    escalating to it."""
    judges = {"llm": OpenAIJudgeConfig(**{**LLM, **options}),
              "cheap-first": CascadeJudgeConfig(**CASCADE)}
    return judge_identity(judges, name, builtin_version="2", prompt_version="1")


#: Options that can give the same event another score, at a value other than the default.
SCORING = {"model": "gpt-4o", "api": "completions", "logprobs": "never", "top_logprobs": 5}
#: Every other option, at a value other than the default: none is in the identity.
NOT_SCORING: dict[str, Any] = {
    "type": "openai",  # the only value it has
    "base_url": "https://judge.example/v1",
    "api_key_env": "JUDGE_KEY",
    "api_key_file": Path("/run/secrets/judge"),
    "api_key": SecretStr("sk-test"),
    "api_key_header": "api-key",
    "headers": {"OpenAI-Organization": "org-1"},
    "query": {"api-version": "2024-06-01"},
    # auto and always score a reply alike (always: an error where auto asks for JSON).
    "logprobs": "always",
    # These only decide between a score and an error, never between two scores.
    "on_missing_options": "json",
    "min_option_mass": 0.9,
    "json_max_tokens": 64,
    "timeout_s": 5.0,
    "max_concurrency": 2,
    "requests_per_s": 3.0,
    "tokens_per_min": 1000,
    "max_retries": 0,
    "rate_limit_retry": "max_retries",
    "backoff_base_s": 0.1,
    "backoff_max_s": 2.0,
    "circuit_failures": 2,
    "circuit_reset_s": 3.0,
    "deadline_s": 60.0,
    "price_input_per_1k": 0.01,
    "price_output_per_1k": 0.02,
    "spend_cap_usd": 5.0,
    "spend_cap_window_s": 3600.0,
    "on_spend_cap": "wait",
    "cache_size": 0,
    "cache_ttl_s": 60.0,
}


def test_every_judge_option_is_classified() -> None:
    # A new option fails here until someone decides whether it can change a score.
    assert set(OpenAIJudgeConfig.model_fields) == set(SCORING) | set(NOT_SCORING)
    defaults = OpenAIJudgeConfig(**LLM)
    for field, value in [*SCORING.items(), *NOT_SCORING.items()]:
        if field != "type":
            assert getattr(defaults, field) != value, field  # each one is a change


@pytest.mark.parametrize("option", sorted(SCORING))
def test_a_scoring_option_is_a_new_identity_alone_and_in_a_cascade(option: str) -> None:
    changed = {option: SCORING[option]}
    assert identity(**changed) != identity()
    assert identity("cheap-first", **changed) != identity("cheap-first")


def test_scoring_options_are_named_only_when_off_their_defaults() -> None:
    assert identity() == {"model": "gpt-4o-mini", "api": "chat"}
    assert identity(logprobs="never") == {"model": "gpt-4o-mini", "api": "chat",
                                          "logprobs": "never"}
    assert identity(top_logprobs=20) == {"model": "gpt-4o-mini", "api": "chat",
                                         "top_logprobs": 20}
    assert identity(top_logprobs=10, logprobs="auto") == identity()
    # Without logprobs no top tokens are read: their number changes nothing.
    assert identity(logprobs="never", top_logprobs=5) == identity(logprobs="never")
    assert len({str(identity(top_logprobs=n)) for n in (1, 5, 10, 20)}) == 4


@pytest.mark.parametrize("option", sorted(NOT_SCORING))
def test_other_options_keep_the_identity(option: str) -> None:
    changed = {option: NOT_SCORING[option]}
    if option in ("spend_cap_usd", "on_spend_cap"):  # needs a price (and a cap)
        changed.update(price_input_per_1k=0.01, spend_cap_usd=5.0)
    assert identity(**changed) == identity()
    assert identity("cheap-first", **changed) == identity("cheap-first")
    # ... also next to a scoring option that is changed.
    assert identity(top_logprobs=5, **changed) == identity(top_logprobs=5)


async def test_a_scoring_option_gives_new_result_ids_and_others_do_not() -> None:
    specs = (spec(name="l", judge="llm"), spec(name="c", judge="cheap-first"))
    base = await score(*specs, judges=JUDGES)
    never = await score(*specs, judges={**JUDGES, "llm": {**LLM, "logprobs": "never"}})
    fewer = await score(*specs, judges={**JUDGES, "llm": {**LLM, "top_logprobs": 5}})
    other = await score(*specs, judges={**JUDGES, "llm": {
        **LLM, "logprobs": "always", "on_missing_options": "json", "json_max_tokens": 64,
        "timeout_s": 5, "max_concurrency": 2, "base_url": "https://judge.example/v1"}})
    ids = [[r.result_id for r in results] for results in (base, never, fewer, other)]
    assert ids[3] == ids[0]
    assert len({i for row in ids[:3] for i in row}) == 6  # cascades follow their step


async def test_what_the_identity_rests_on_at_a_real_endpoint() -> None:
    # The decisions above, checked against the judge itself on one scripted model.
    async with llm_server() as server:
        async def probabilities(fault: str | None = None, **options: Any) -> Any:
            if fault:
                server.fail_next(fault)
            judge = make_judge(server, **options)
            try:
                return dict((await judge.judge(question())).probabilities)
            except JudgeError:
                return "error"
            finally:
                await judge.aclose()

        read = await probabilities()
        # In the identity: another top_logprobs sums another mass (" yes" is cut at 1),
        # so another score for the same event; never, 0/1 from a JSON answer.
        assert await probabilities(top_logprobs=1) == {"yes": 1.0, "no": 0.0} != read
        assert await probabilities(logprobs="never") == {"yes": 1.0, "no": 0.0} != read
        # Out of it: the same reply scores the same; where they differ, one is an error.
        assert await probabilities(logprobs="always") == read
        assert await probabilities(on_missing_options="json") == read
        assert await probabilities("nologprobs", logprobs="always") == "error"
        assert await probabilities("nologprobs", logprobs="auto") == {"yes": 1.0, "no": 0.0}
        assert await probabilities("nooptions") == "error"
        assert await probabilities("nooptions", on_missing_options="json") == {
            "yes": 1.0, "no": 0.0}
