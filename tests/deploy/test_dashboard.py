"""The Grafana dashboard is generated, current, complete, and shipped in the Helm chart."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from evalstream.metrics import Metrics
from tests.deploy.test_prometheus_rules import RECORDED, SELECTOR, metric_labels, recorded_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "evalstream.json"
HELM_DASHBOARD = ROOT / "helm" / "evalstream" / "files" / "dashboard.json"
GENERATE = ROOT / "deploy" / "grafana" / "generate.py"


def load() -> dict[str, object]:
    data: dict[str, object] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def test_generated_files_are_current() -> None:
    proc = subprocess.run([sys.executable, str(GENERATE), "--check"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def test_helm_chart_ships_the_same_dashboard() -> None:
    assert HELM_DASHBOARD.read_bytes() == DASHBOARD.read_bytes()


def test_templating_has_datasource_route_and_evaluator() -> None:
    board = load()
    templating = board["templating"]
    assert isinstance(templating, dict)
    names = {v["name"]: v for v in templating["list"]}
    assert {"datasource", "route", "evaluator", "window"} <= set(names)
    assert names["route"]["multi"]
    assert names["route"]["includeAll"]
    assert "$route" in names["evaluator"]["query"]


def exprs(board: dict[str, object]) -> dict[str, list[str]]:
    panels = board["panels"]
    assert isinstance(panels, list)
    out: dict[str, list[str]] = {}
    for panel in panels:
        if panel["type"] == "row":
            continue
        targets = panel.get("targets") or []
        out[panel["title"]] = [t["expr"] for t in targets]
    return out


def test_every_panel_queries_prometheus_and_filters_by_variables() -> None:
    board = load()
    panels = exprs(board)
    assert len(panels) >= 15
    for title, queries in panels.items():
        assert queries, f"panel {title!r} has no query"
        assert all(q.strip() for q in queries)
    joined = "\n".join(q for qs in panels.values() for q in qs)
    # The pass-rate panels honour the route/evaluator selection.
    assert 'route=~"$route", evaluator=~"$evaluator"' in joined


def test_dashboard_covers_what_operators_watch() -> None:
    joined = "\n".join(q for qs in exprs(load()).values() for q in qs)
    for needle in (
        "evalstream_pass_rate:ratio_rate5m", "evalstream_pass_rate:lower95_5m",
        "evalstream_pass_rate_upper", "evalstream_pass_rate_samples",
        "evalstream_evaluations:effective_n5m",
        "evalstream_evaluations_total", "evalstream_events_skipped_total",
        "evalstream_judge_latency_seconds_bucket", "evalstream_judge_cost_usd_total",
        "evalstream_judge_requests_total", "evalstream_consumer_lag_messages",
        "evalstream_dead_letters_total", "evalstream_drift_alert_firing",
        "evalstream_drift_statistic", "evalstream_topic_other_share",
        "evalstream_canary_agreement:ratio1h", "evalstream_canary_ece:ratio1h",
        "evalstream_canary_brier:mean1h", "evalstream_canary_evaluations_total",
        "evalstream_judge_rate_limit_paused_seconds_total",
        "evalstream_sessions_open", "evalstream_sessions_closed_total",
        "evalstream_sessions_cut_short:ratio1h", "evalstream_otel_results_rejected_total",
    ):
        assert needle in joined, needle


def panels_by_title(board: dict[str, object]) -> dict[str, dict[str, Any]]:
    panels = board["panels"]
    assert isinstance(panels, list)
    return {p["title"]: p for p in panels if p["type"] != "row"}


def test_stat_panels_show_zero_before_the_first_event() -> None:
    # Labelled counters (evalstream_alerts_total) have no series until the first alert:
    # without a fallback the stat reads "No data", which looks like a broken query.
    stats = {t: p for t, p in panels_by_title(load()).items() if p["type"] == "stat"}
    assert "Alert events published (24h)" in stats
    for title, panel in stats.items():
        for target in panel["targets"]:
            assert target["expr"].rstrip().endswith("or vector(0)"), title


def _emitted_judge_outcomes() -> set[str]:
    """Outcome label values the judges actually pass to judge_requests."""
    found: set[str] = set()
    for path in (ROOT / "src" / "evalstream" / "judges").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r'judge_requests\.labels\([^,]+, "(\w+)"\)', text))
        # outcome = "rate_limited" if ... else "retry"
        for a, b in re.findall(r'outcome = "(\w+)" if .* else "(\w+)"', text):
            found |= {a, b}
    return found


def test_judge_outcome_panel_lists_the_real_outcomes() -> None:
    emitted = _emitted_judge_outcomes()
    documented = set(re.findall(r"\w+", Metrics().judge_requests._documentation.split("(")[1]))
    assert emitted == documented == {"ok", "retry", "rate_limited", "error", "deadline",
                                     "capped"}
    desc = panels_by_title(load())["Judge requests by outcome"]["description"]
    assert "circuit_open" not in desc
    for outcome in emitted:
        assert re.search(rf"\b{outcome}\b", desc), outcome


def test_per_worker_panels_keep_workers_apart() -> None:
    aggregation = re.compile(r"\b(sum|avg|max|min|count)\s*(by\s*\(([^)]*)\))?\s*\(")
    per_worker = {t: p for t, p in panels_by_title(load()).items() if "per worker" in t}
    assert "Evaluations in window (per worker)" in per_worker
    for title, panel in per_worker.items():
        for target in panel["targets"]:
            for _op, _by, labels in aggregation.findall(target["expr"]):
                assert "instance" in labels, f"{title!r} aggregates across workers"
            assert "{{instance}}" in target["legendFormat"], title


def test_dashboard_uses_only_exported_metrics_and_labels() -> None:
    exported = metric_labels()
    for title, queries in exprs(load()).items():
        for query in queries:
            for name, matchers in SELECTOR.findall(query):
                assert name in exported, f"{title}: {name}"
                used = set(re.findall(r"([a-zA-Z_]\w*)\s*[=!]~?", matchers))
                assert used <= exported[name], (title, name, used - exported[name])


def test_dashboard_reads_only_recorded_series() -> None:
    """Panels on cluster-wide rates read recording rules: each must be one the shipped rules
    record, or the panel shows "No data" for good."""
    recorded = recorded_names()
    used = {name for queries in exprs(load()).values() for query in queries
            for name in RECORDED.findall(query)}
    assert used, "the pass-rate panels read recorded series"
    assert used <= recorded, sorted(used - recorded)


def test_template_variables_query_exported_metrics() -> None:
    exported = metric_labels()
    templating = load()["templating"]
    assert isinstance(templating, dict)
    for variable in templating["list"]:
        if variable["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((\w+)(?:\{[^}]*\})?, (\w+)\)",
                                     variable["query"]).groups()
        assert metric in exported, (variable["name"], metric)
        assert label in exported[metric], (variable["name"], label)
