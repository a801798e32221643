"""The Prometheus rules pass `promtool check rules` and their unit tests (spike, quiet,
small-sample), the tests have teeth, and the Helm chart ships an identical copy."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
TESTS = ROOT / "deploy" / "prometheus" / "tests.yaml"
HELM_RULES = ROOT / "helm" / "evalstream" / "files" / "prometheus-rules.yaml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install the Debian package `prometheus`")
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_rules_are_valid() -> None:
    proc = run_promtool("check", "rules", str(RULES), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_rule_unit_tests_pass() -> None:
    proc = run_promtool("test", "rules", str(TESTS), cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_unit_tests_cover_spike_quiet_and_small_sample() -> None:
    doc = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    fired: set[str] = set()
    silent: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    assert {"EvalstreamOffTopicSpike", "EvalstreamPassRateDrop",
            "EvalstreamDriftDetected"} <= fired
    assert {"EvalstreamOffTopicSpike", "EvalstreamPassRateDrop"} <= silent


@pytest.mark.parametrize("guard", [
    "and route:evalstream_topic_labels:increase5m >= 30",
    "and route_evaluator:evalstream_evaluations:increase5m >= 30",
    "and (route:evalstream_topic_labels:increase1h offset 5m) >= 100",
])
def test_small_sample_tests_fail_without_the_minimum_n_guard(tmp_path: Path, guard: str) -> None:
    text = RULES.read_text(encoding="utf-8")
    assert guard in text
    (tmp_path / "rules.yaml").write_text(text.replace(guard, ""), encoding="utf-8")
    shutil.copy(TESTS, tmp_path / "tests.yaml")
    proc = run_promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert proc.returncode != 0, "the small-sample test did not notice a missing guard"
    assert "FAILED" in proc.stdout + proc.stderr


def test_every_alert_is_labelled_and_explained() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 6
    for rule in alerts:
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]
    # Recording rules follow level:metric:operations naming.
    records = [r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r]
    assert all(re.fullmatch(r"[a-z_]+:evalstream_[a-z0-9_]+:[a-z0-9_]+", r) for r in records)


def test_helm_chart_ships_the_same_rules() -> None:
    assert HELM_RULES.read_bytes() == RULES.read_bytes(), (
        "helm/evalstream/files/prometheus-rules.yaml is stale: run deploy/grafana/generate.py")
