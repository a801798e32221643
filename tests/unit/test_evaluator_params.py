"""Invalid evaluator parameters fail at start-up, naming the route and the field."""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.config import EvaluatorSpec
from evalstream.errors import ConfigError
from evalstream.evaluators import registry
from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.events import TraceEvent
from tests.support.scripted_judge import ScriptedJudge

WHERE = "routes[2] (support) evaluators[1]"


def create(evaluator: str, judge: str = "j", **params: Any) -> None:
    registry.create(EvaluatorSpec(evaluator=evaluator, judge=judge, params=params),
                    {"j": ScriptedJudge()}, where=WHERE)


@pytest.mark.parametrize(("evaluator", "params", "field", "words"), [
    ("topic_adherence", {}, "params", "criteria is required"),
    ("topic_adherence", {"criteria": "Cooking", "threshold": 1.5}, "params.threshold",
     "less than or equal to 1"),
    ("refusal", {"threshold": -0.1}, "params.threshold", "greater than or equal to 0"),
    ("refusal", {"treshold": 0.4}, "params.treshold", "Extra inputs"),
    ("role_adherence", {}, "params", "chatbot_role is required"),
    ("role_adherence", {"chatbot_role": "x" * 10, "threshold": "high"}, "params.threshold",
     "valid number"),
    # Conformance is p x 100 and no judge is certain: the seed's default 100 never passes.
    ("role_violation", {"threshold": 100}, "params.threshold", "can never pass"),
    ("role_violation", {"threshold": 99.5}, "params.threshold", "use at most 99"),
    ("topic", {}, "params.topics", "Field required"),
    ("topic", {"topics": {}}, "params.topics", "at least 1"),
    ("topic", {"topics": {"Billing Stuff": "x"}}, "params.topics", "lower-case"),
    ("topic", {"topics": {"billing": "x"}, "fail_topics": ["shipping"]}, "params.fail_topics",
     "unknown topics"),
    ("frustration", {"threshold": 6}, "params.threshold", "less than or equal to 5"),
    ("sentiment", {"source": "reply"}, "params.source", "'input'"),
    ("classifier", {"labels": {"a": "x"}}, "params.labels", "at least 2"),
    # ``$`` also matches before a final newline: such a name broke its line of the prompt.
    ("classifier", {"labels": {"safe\n": "x", "unsafe": "y"}}, "params.labels",
     "must be letters"),
    ("topic", {"topics": {"billing\n": "x"}}, "params.topics", "lower-case"),
    ("scorer", {"rubric": "1 bad .. 3 good", "levels": 3, "threshold": 4}, "params",
     "above levels"),
    # A failing label listed twice would be subtracted twice (score < 0): rejected.
    ("sentiment", {"fail_labels": ["negative", "negative"]}, "params.fail_labels",
     "repeated: ['negative']"),
    ("topic", {"topics": {"bank": "money"}, "fail_topics": ["other", "other"]},
     "params.fail_topics", "repeated: ['other']"),
    ("classifier", {"labels": {"a": "x", "b": "y"}, "fail_labels": ["a", "a"]},
     "params.fail_labels", "repeated: ['a']"),
    # Judges fold case when reading an answer: these two labels would collapse into one.
    ("classifier", {"labels": {"Yes": "agrees", "yes": "agrees weakly", "no": "n"}},
     "params.labels", "[['Yes', 'yes']] differ only in case"),
])
def test_bad_params_name_route_and_field(evaluator: str, params: dict[str, Any], field: str,
                                         words: str) -> None:
    with pytest.raises(ConfigError) as info:
        create(evaluator, **params)
    message = str(info.value)
    assert message.startswith(f"{WHERE} ({evaluator}): {field}:")
    assert words in message


def test_unknown_evaluator_and_judge() -> None:
    with pytest.raises(ConfigError, match=r"routes\[2\] \(support\) evaluators\[1\]\.evaluator: "
                                          r"unknown evaluator 'refusl'"):
        create("refusl")
    with pytest.raises(ConfigError, match=r"evaluators\[1\]\.judge: no judge named 'gpt'"):
        create("refusal", judge="gpt")


def test_every_evaluator_is_registered() -> None:
    assert set(registry.names()) >= {
        "topic_adherence", "topic", "refusal", "frustration", "sentiment", "role_violation",
        "role_adherence", "groundedness", "answer_relevancy", "context_relevancy",
        "question_clarity", "toxicity", "text_similarity", "summarization", "classifier",
        "scorer"}
    assert [name for name, summary in registry.describe() if not summary] == []


@pytest.mark.parametrize(("evaluator", "params"), [
    ("groundedness", {}),
    ("answer_relevancy", {}),
    ("context_relevancy", {}),
    ("question_clarity", {}),
    ("text_similarity", {}),
    ("classifier", {"labels": {"a": "x", "b": "y"}}),
    ("scorer", {"rubric": "1 bad .. 5 good"}),
])
def test_an_evaluator_the_builtin_judge_cannot_answer_fails_at_start_up(
        evaluator: str, params: dict[str, Any]) -> None:
    # The builtin judge is the default: without this check the config passed check-config
    # and then every result was an error.
    from evalstream.judges.builtin import BuiltinJudge

    with pytest.raises(ConfigError) as info:
        registry.create(EvaluatorSpec(evaluator=evaluator, params=params),
                        {"builtin": BuiltinJudge()}, where=WHERE)
    message = str(info.value)
    assert message.startswith(f"{WHERE} ({evaluator}).judge: judge 'builtin' cannot answer "
                              f"'{evaluator}'")
    assert "configure an LLM judge" in message


@pytest.mark.parametrize("evaluator", [
    "refusal", "sentiment", "toxicity", "frustration", "prompt_injection", "summarization",
    "role_violation"])
def test_evaluators_the_builtin_judge_answers_still_build(evaluator: str) -> None:
    from evalstream.judges.builtin import BuiltinJudge

    judge = BuiltinJudge()
    cls = registry.get(evaluator)
    built = registry.create(EvaluatorSpec(evaluator=evaluator, name=f"my_{evaluator}"),
                            {"builtin": judge}, where=WHERE)
    assert type(built) is cls
    assert built.label == f"my_{evaluator}"
    assert built.judge is judge
    assert built.params == cls.params_model()  # the defaults, validated
    assert all(judge.supports(task) for task in built.judge_tasks())


def test_a_plugin_that_declares_no_judge_task_builds_on_the_builtin_judge(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A plugin may ask its judge nothing (or under names of its own): only what it declares
    # is checked, so the default builtin judge must not reject it (it once did: every
    # evaluator was taken to ask the task named after itself).
    from evalstream.judges.builtin import BuiltinJudge

    registry.names()  # the builtins are loaded before the registry is swapped below
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # undone after

    @registry.register
    class LengthCheck(Evaluator[EvaluatorParams]):
        name = "unit_length_check"
        summary = "test only: asks no judge"

        async def evaluate(self, event: TraceEvent) -> Score:
            return Score(score=1.0, passed=True)

    built = registry.create(EvaluatorSpec(evaluator="unit_length_check"),
                            {"builtin": BuiltinJudge()}, where=WHERE)
    assert built.judge_tasks() == ()

    class AsksOwn(LengthCheck):
        name = "unit_length_check_asks"
        asks_own_task = True

    registry.register(AsksOwn)
    with pytest.raises(ConfigError, match="cannot answer 'unit_length_check_asks'"):
        registry.create(EvaluatorSpec(evaluator="unit_length_check_asks"),
                        {"builtin": BuiltinJudge()}, where=WHERE)
