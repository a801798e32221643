"""The chart's tunable alert thresholds: ``prometheusRule.canaryAgreementFloor`` and
``prometheusRule.consumerLagThreshold`` land in their alerts' expressions, bad values are
refused, and a rules file the template no longer matches fails rendering loudly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.deploy.test_helm import CHART, Manifest, one, render, validate_manifest

CANARY = "EvalstreamCanaryAgreementLow"
LAG = "EvalstreamConsumerLagHigh"
#: The shipped comparisons the template rewrites (deploy/prometheus/rules.yaml).
CANARY_TEXT = "evalstream_canary_agreement:upper95_1h < 0.8"
LAG_TEXT = ") > 10000"


def _rule(values: dict[str, Any], chart: Path = CHART) -> Manifest:
    """The PrometheusRule rendered from ``chart`` (a modified copy in some tests)."""
    if chart == CHART:
        return one(render(values), "PrometheusRule")
    with helm.Chart.load(chart) as loaded:
        files = loaded.render(values, name="es", namespace="llm")
    text = next(t for path, t in files.items() if path.endswith("/prometheusrule.yaml"))
    rule: Manifest = yaml.safe_load(text)
    return rule


def _alert_exprs(rule: Manifest) -> dict[str, str]:
    return {r["alert"]: str(r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]
            if "alert" in r}


def _enabled(**settings: Any) -> dict[str, Any]:
    return {"prometheusRule": {"enabled": True, **settings}}


def _chart_copy(tmp_path: Path) -> Path:
    chart = tmp_path / "evalstream"
    shutil.copytree(CHART, chart)
    return chart


def test_defaults_render_the_shipped_rules_unchanged() -> None:
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text("utf-8"))
    rule = _rule(_enabled())
    assert rule["spec"]["groups"] == shipped["groups"]
    exprs = _alert_exprs(rule)
    assert CANARY_TEXT in exprs[CANARY]
    assert exprs[LAG].endswith(LAG_TEXT)


def test_custom_thresholds_land_in_their_alerts_only(tmp_path: Path) -> None:
    rule = _rule(_enabled(canaryAgreementFloor=0.85, consumerLagThreshold=2_500_000))
    validate_manifest(rule)
    exprs = _alert_exprs(rule)
    assert exprs[CANARY] == (
        "route_evaluator_judge:evalstream_canary_agreement:upper95_1h < 0.85"
        " and route_evaluator_judge:evalstream_canary_compared:increase1h >= 20")
    # An integer, not Go's %v of a float64 (2.5e+06).
    assert exprs[LAG].endswith(") > 2500000"), exprs[LAG]
    assert "evalstream_consumer_lag_messages" in exprs[LAG]
    # Nothing else moved: every other rule is the default rendering's.
    default = _rule(_enabled())
    changed = [(r1.get("alert") or r1.get("record"))
               for g1, g2 in zip(rule["spec"]["groups"], default["spec"]["groups"], strict=True)
               for r1, r2 in zip(g1["rules"], g2["rules"], strict=True) if r1 != r2]
    assert changed == [CANARY, LAG]
    # What the chart renders is still a valid rule file for Prometheus.
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}), "utf-8")
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool not found: install the Debian package `prometheus`"
    proc = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"canaryAgreementFloor": 0}, "canaryAgreementFloor': exclusiveMinimum"),
        ({"canaryAgreementFloor": 1.5}, "canaryAgreementFloor': exclusiveMaximum"),
        ({"canaryAgreementFloor": 1}, "canaryAgreementFloor': exclusiveMaximum"),
        ({"canaryAgreementFloor": -0.2}, "canaryAgreementFloor': exclusiveMinimum"),
        ({"canaryAgreementFloor": "0.9"}, "canaryAgreementFloor': got string"),
        ({"consumerLagThreshold": 0}, "consumerLagThreshold': minimum"),
        ({"consumerLagThreshold": -100}, "consumerLagThreshold': minimum"),
        ({"consumerLagThreshold": 1.5}, "consumerLagThreshold': got number, want integer"),
        ({"consumerLagThreshold": "10000"}, "consumerLagThreshold': got string"),
    ],
    ids=["floor-0", "floor-1.5", "floor-1", "floor-negative", "floor-string", "lag-0",
         "lag-negative", "lag-fraction", "lag-string"],
)
def test_schema_refuses_bad_thresholds(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(_enabled(**settings))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"canaryAgreementFloor": 1.5}, "canaryAgreementFloor must be a number between 0 and 1"),
        ({"canaryAgreementFloor": "0.9"}, "canaryAgreementFloor must be a number"),
        ({"canaryAgreementFloor": None}, "canaryAgreementFloor must be a number"),
        ({"consumerLagThreshold": 0}, "consumerLagThreshold must be a positive integer"),
        ({"consumerLagThreshold": 99.5}, "consumerLagThreshold must be a positive integer"),
        ({"consumerLagThreshold": "10000"}, "consumerLagThreshold must be a positive integer"),
    ],
    ids=["floor-1.5", "floor-string", "floor-null", "lag-0", "lag-fraction", "lag-string"],
)
def test_template_refuses_bad_thresholds_without_the_schema(
    tmp_path: Path, settings: dict[str, Any], message: str
) -> None:
    """helm --skip-schema-validation bypasses values.schema.json; the template still
    refuses a value that would make a broken or meaningless PromQL comparison."""
    chart = _chart_copy(tmp_path)
    (chart / "values.schema.json").unlink()
    with pytest.raises(helm.HelmError, match=message):
        _rule(_enabled(**settings), chart)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # The comparison rewritten (e.g. to <=): the floor would silently not apply.
        ((CANARY_TEXT, CANARY_TEXT.replace(" < ", " <= ")),
         r'canaryAgreementFloor cannot be applied: the expr of alert '
         r'EvalstreamCanaryAgreementLow .* must contain ".*< 0.8" exactly once, found 0'),
        ((LAG_TEXT, ") > 20000"),
         r'consumerLagThreshold cannot be applied: the expr of alert '
         r'EvalstreamConsumerLagHigh .* must contain "\) > 10000" exactly once, found 0'),
        # The alert renamed: no expression to rewrite at all.
        (("alert: EvalstreamConsumerLagHigh", "alert: EvalstreamLagHigh"),
         "consumerLagThreshold cannot be applied: files/prometheus-rules.yaml must hold "
         "exactly one alert EvalstreamConsumerLagHigh, found 0"),
    ],
    ids=["canary-comparison-edited", "lag-threshold-edited", "lag-alert-renamed"],
)
def test_rules_the_template_no_longer_matches_fail_rendering(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    chart = _chart_copy(tmp_path)
    rules = chart / "files" / "prometheus-rules.yaml"
    text = rules.read_text("utf-8")
    assert text.count(edit[0]) == 1
    rules.write_text(text.replace(*edit), "utf-8")
    with pytest.raises(helm.HelmError, match=message):
        _rule(_enabled(), chart)
