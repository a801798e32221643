"""The Grafana dashboard is generated, current, complete, and shipped in the Helm chart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
        "evalstream_evaluations_total", "evalstream_events_skipped_total",
        "evalstream_judge_latency_seconds_bucket", "evalstream_judge_cost_usd_total",
        "evalstream_judge_requests_total", "evalstream_consumer_lag_messages",
        "evalstream_dead_letters_total", "evalstream_drift_alert_firing",
        "evalstream_drift_statistic", "evalstream_topic_other_share",
    ):
        assert needle in joined, needle
