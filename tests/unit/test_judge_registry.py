"""build_judges / close_judges and the builtin judge's contract."""

from __future__ import annotations

import pytest

from evalstream.config import BuiltinJudgeConfig
from evalstream.errors import ConfigError, JudgeUnsupportedError
from evalstream.judges.base import JudgeRequest
from evalstream.judges.builtin import BuiltinJudge
from evalstream.judges.registry import build_judges, close_judges
from evalstream.metrics import Metrics


async def test_builtin_is_always_present() -> None:
    judges = build_judges({}, Metrics())
    assert set(judges) == {"builtin"}
    assert isinstance(judges["builtin"], BuiltinJudge)
    await close_judges(judges)


async def test_builtin_may_be_configured_under_another_name() -> None:
    judges = build_judges({"offline": BuiltinJudgeConfig()}, Metrics())
    assert set(judges) == {"builtin", "offline"}
    assert judges["offline"].name == "offline"


def test_unknown_type_is_a_config_error() -> None:
    class Odd:
        type = "nope"

    with pytest.raises(ConfigError, match="unknown judge type 'nope'"):
        build_judges({"x": Odd()}, Metrics())


async def test_builtin_refusal_shapes() -> None:
    judge = BuiltinJudge()
    refuse = await judge.judge(JudgeRequest(
        task="refusal", instructions="", question="",
        data=(("output", "I'm sorry, but I can't help with that request."),)))
    comply = await judge.judge(JudgeRequest(
        task="refusal", instructions="", question="",
        data=(("output", "Sure! Here are the steps:\n1. Preheat the oven."),)))
    assert refuse.p("yes") > 0.9
    assert comply.p("no") > 0.9
    assert abs(sum(refuse.probabilities.values()) - 1.0) < 1e-9
    assert refuse.rationale
    assert "refuses" in refuse.rationale
    assert refuse.info.backend == "builtin"


async def test_builtin_rejects_unknown_task_and_missing_field() -> None:
    judge = BuiltinJudge()
    assert not judge.supports("custom_rubric")
    with pytest.raises(JudgeUnsupportedError, match="custom_rubric"):
        await judge.judge(JudgeRequest(task="custom_rubric", instructions="", question=""))
    with pytest.raises(JudgeUnsupportedError, match="output"):
        await judge.judge(JudgeRequest(task="refusal", instructions="", question=""))
