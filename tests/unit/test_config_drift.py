"""Drift settings that name things: a misspelt name is refused instead of silently ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalstream.config import load_settings
from evalstream.drift.engine import KIND_LABEL_MIX, KIND_LABEL_SHARE, KIND_PASS_RATE
from evalstream.errors import ConfigError

ROUTES = ("routes:\n  - name: support\n    evaluators: [{evaluator: refusal}, "
          "{evaluator: sentiment, name: mood}]\n")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_every_alert_kind_can_be_given_a_severity() -> None:
    kinds = {KIND_PASS_RATE: "critical", KIND_LABEL_SHARE: "info", KIND_LABEL_MIX: "warning"}
    assert load_settings(None, drift={"severities": kinds}).drift.severities == kinds


def test_a_misspelt_alert_kind_is_refused() -> None:
    # Was accepted, and pass_rate_drop alerts stayed at their default "warning".
    with pytest.raises(ConfigError, match=r"drift\.severities: .*unknown alert kind\(s\) "
                                          r"\['pass_rate_dorp'\] \(kinds: pass_rate_drop, "):
        load_settings(None, drift={"severities": {"pass_rate_dorp": "critical"}})


def test_evaluator_labels_name_each_evaluator_by_its_name_else_its_type(
        tmp_path: Path) -> None:
    # What drift.baselines and drift.watch_labels are checked against, in both places.
    assert load_settings(write(tmp_path, ROUTES)).evaluator_labels == {"refusal", "mood"}


@pytest.mark.parametrize("key", ["support/refusal", "refusal", "support/mood", "mood"])
def test_baselines_by_route_and_evaluator_or_evaluator_load(key: str, tmp_path: Path) -> None:
    text = ROUTES + f"drift:\n  baselines: {{'{key}': 0.9}}\n"
    assert load_settings(write(tmp_path, text)).drift.baselines == {key: 0.9}


@pytest.mark.parametrize("key", ["support/refusl", "other/refusal", "sentiment",
                                 "support/sentiment", "support"])
def test_a_baseline_naming_no_evaluator_is_refused(key: str, tmp_path: Path) -> None:
    # Was accepted and never looked up: the detector warmed up instead (by default for
    # 1000 evaluations) and the operator's baseline was silently unused. A named evaluator
    # ("mood") is known by its name, not its type.
    text = ROUTES + f"drift:\n  baselines: {{'{key}': 0.9, 'mood': 0.8}}\n"
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    message = str(info.value)
    assert f"drift.baselines: ['{key}'] name no evaluator of the routes" in message
    assert "known: ['support/mood', 'support/refusal']" in message


def test_check_config_exits_2_on_a_baseline_naming_no_evaluator(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evalstream.cli import EXIT_CONFIG, main

    path = write(tmp_path, ROUTES + "drift:\n  baselines: {'support/refusl': 0.9}\n")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    assert "drift.baselines: ['support/refusl']" in capsys.readouterr().err


LABELS = ("routes:\n  - name: support\n    evaluators:\n      - {evaluator: sentiment}\n"
          "      - {evaluator: topic, name: subject, params: {topics: {orders: order status}}}\n"
          "      - {evaluator: refusal}\n")


@pytest.mark.parametrize("watch", ["", "drift:\n  watch_labels: {subject: orders, "
                                       "sentiment: positive, refusal: refused}\n"])
def test_watched_labels_the_evaluators_give_load(watch: str, tmp_path: Path) -> None:
    from evalstream.app.checks import check_settings

    check_settings(load_settings(write(tmp_path, LABELS + watch)))


@pytest.mark.parametrize(("watch", "says"), [
    ("{sentiment: negatve}", "drift.watch_labels.sentiment: 'negatve' is not a label that "
                             "routes[0] (support) evaluator 'sentiment' gives (labels: "
                             "['negative', 'neutral', 'positive'])"),
    ("{subject: billing}", "drift.watch_labels.subject: 'billing' is not a label that "
                           "routes[0] (support) evaluator 'subject' gives (labels: "
                           "['orders', 'other'])"),
    # Not a label evaluator, but its results have a closed label set, whose share the drift
    # engine watches: a label outside it was accepted and never matched (checked: fails
    # without the change).
    ("{refusal: anything}", "drift.watch_labels.refusal: 'anything' is not a label that "
                            "routes[0] (support) evaluator 'refusal' gives (labels: "
                            "['not_refused', 'refused'])"),
])
def test_a_watched_label_the_evaluator_never_gives_is_refused(
        watch: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Was accepted: the label's share stayed 0, so its alert could never fire.
    from evalstream.app.worker import Worker
    from evalstream.cli import EXIT_CONFIG, main

    path = write(tmp_path, LABELS + f"drift:\n  watch_labels: {watch}\n")
    assert main(["check-config", str(path)]) == EXIT_CONFIG
    assert says in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"drift\.watch_labels\."):
        Worker(load_settings(path))  # what `run` builds, before connecting


def test_watched_labels_are_not_checked_with_drift_off(tmp_path: Path) -> None:
    from evalstream.app.checks import check_settings

    text = LABELS + "drift:\n  enabled: false\n  watch_labels: {sentiment: negatve}\n"
    check_settings(load_settings(write(tmp_path, text)))
