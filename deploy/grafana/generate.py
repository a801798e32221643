"""Generate the evalstream Grafana dashboard (grafana-foundation-sdk) and the Helm copies.

Writes ``deploy/grafana/evalstream.json`` and the chart's copies
``helm/evalstream/files/dashboard.json`` and ``helm/evalstream/files/prometheus-rules.yaml``
(the latter copied byte-for-byte from ``deploy/prometheus/rules.yaml``). ``--check`` writes
nothing and exits 1 when any file is out of date (CI runs it through
``tests/deploy/test_dashboard.py``).

Run: ``python deploy/grafana/generate.py`` from the repository root (or anywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "evalstream.json"
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
HELM_DASHBOARD = ROOT / "helm" / "evalstream" / "files" / "dashboard.json"
HELM_RULES = ROOT / "helm" / "evalstream" / "files" / "prometheus-rules.yaml"

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'route=~"$route", evaluator=~"$evaluator"'
RATE = "$__rate_interval"


def _q(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)


def _ts(title: str, desc: str, unit: str, *queries: prometheus.Dataquery,
        width: int = 12, lo: float | None = None,
        hi: float | None = None) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(desc).datasource(DS).unit(unit)
             .height(8).span(width).line_width(1).fill_opacity(10))
    if lo is not None:
        panel = panel.min(lo)
    if hi is not None:
        panel = panel.max(hi)
    for query in queries:
        panel = panel.with_target(query)
    return panel


def _stat(title: str, desc: str, unit: str, query: prometheus.Dataquery,
          width: int = 6) -> stat.Panel:
    return (stat.Panel().title(title).description(desc).datasource(DS).unit(unit)
            .height(4).span(width).with_target(query))


def _variable(name: str, label: str, query: str) -> dash.QueryVariable:
    return (dash.QueryVariable(name).label(label).datasource(DS).query(query)
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True).include_all(True).all_value(".*"))


def build() -> dict[str, object]:
    """The dashboard as plain JSON data."""
    board = (
        dash.Dashboard("evalstream")
        .uid("evalstream")
        .tags(["evalstream", "llm", "evaluation"])
        .description("Live pass rates with 95% intervals, evaluation volume, judges and "
                     "their calibration on canaries, intake health and drift alerts of the "
                     "evalstream workers.")
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .with_variable(dash.DatasourceVariable("datasource").label("Data source")
                       .type("prometheus"))
        .with_variable(_variable("route", "Route",
                                 "label_values(evalstream_evaluations_total, route)"))
        .with_variable(_variable(
            "evaluator", "Evaluator",
            'label_values(evalstream_evaluations_total{route=~"$route"}, evaluator)'))
        .with_variable(_variable("window", "Window",
                                 "label_values(evalstream_pass_rate, window)"))
    )

    board = board.with_row(dash.Row("Live pass rates"))
    board = board.with_panel(_ts(
        "Pass rate, all replicas (5m) with 95% Wilson interval",
        "Weighted by 1/sample_rate, summed over every replica (recording rules). The band is "
        "the 95% Wilson interval from the effective number of evaluations in the window: "
        "the count itself at one sample rate, fewer where strata mix rates (at most Kish's "
        "(sum w)^2 / sum w^2 of the panel 'Evaluations in window, all replicas'; less where "
        "a rarely sampled stratum's pass rate differs from the rest).",
        "percentunit",
        _q(f"route_evaluator:evalstream_pass_rate:ratio_rate5m{{{SEL}}}",
           "{{route}} / {{evaluator}}", "A"),
        _q(f"route_evaluator:evalstream_pass_rate:lower95_5m{{{SEL}}}",
           "lower {{route}} / {{evaluator}}", "B"),
        _q(f"route_evaluator:evalstream_pass_rate:upper95_5m{{{SEL}}}",
           "upper {{route}} / {{evaluator}}", "C"),
        lo=0, hi=1))
    board = board.with_panel(_ts(
        "Pass rate per worker (sliding window) with interval",
        "Each replica's own live gauge over the selected window; NaN (a gap) means too "
        "few evaluations in the window, never 0%.",
        "percentunit",
        _q(f'evalstream_pass_rate{{{SEL}, window=~"$window"}}',
           "{{route}} / {{evaluator}} {{window}} {{instance}}", "A"),
        _q(f'evalstream_pass_rate_lower{{{SEL}, window=~"$window"}}',
           "lower {{route}} / {{evaluator}} {{window}} {{instance}}", "B"),
        _q(f'evalstream_pass_rate_upper{{{SEL}, window=~"$window"}}',
           "upper {{route}} / {{evaluator}} {{window}} {{instance}}", "C"),
        lo=0, hi=1))
    board = board.with_panel(_ts(
        "Evaluations in window (per worker)",
        "Sample count behind each worker's live pass rate (the panel to the left): each "
        "replica counts only the partitions it holds.",
        "short",
        _q(f'evalstream_pass_rate_samples{{{SEL}, window=~"$window"}}',
           "{{route}} / {{evaluator}} {{window}} {{instance}}")))
    board = board.with_panel(_ts(
        "Evaluations in window, all replicas (5m): effective and counted",
        "What the alerts' minimum-n guards use: Kish's effective sample size "
        "(sum w)^2 / sum w^2 of the weighted pass rate, beside the evaluations counted. "
        "Equal at one sample rate; where a route's strata mix rates, a few heavily weighted "
        "(rarely sampled) results count for less. The pass-rate band uses at most this "
        "(interval_n5m: less where a rarely sampled stratum's pass rate differs).",
        "short",
        _q(f"route_evaluator:evalstream_evaluations:effective_n5m{{{SEL}}}",
           "effective {{route}} / {{evaluator}}", "A"),
        _q(f"route_evaluator:evalstream_evaluations:increase5m{{{SEL}}}",
           "counted {{route}} / {{evaluator}}", "B")))
    board = board.with_panel(_ts(
        "Off-topic share (topic evaluator, 5m)",
        "Share of conversations labelled 'other' by the evaluator named 'topic' in the "
        "routes (the recording rules select evaluator=\"topic\"), all replicas, weighted by "
        "1/sample_rate; the lower 95% bound uses its effective sample size.",
        "percentunit",
        _q('route:evalstream_topic_other_share:ratio_rate5m{route=~"$route"}', "{{route}}",
           "A"),
        _q('route:evalstream_topic_other_share:lower95_5m{route=~"$route"}',
           "lower {{route}}", "B"),
        lo=0, hi=1))

    board = board.with_row(dash.Row("Volume"))
    board = board.with_panel(_ts(
        "Evaluations per second by outcome", "passed, failed, labelled, error, skipped.", "ops",
        _q(f"sum by (route, evaluator, outcome) "
           f"(rate(evalstream_evaluations_total{{{SEL}}}[{RATE}]))",
           "{{route}} / {{evaluator}} {{outcome}}")))
    board = board.with_panel(_ts(
        "Skips by reason", "Events not evaluated, by reason (sampling, no_route, ...).", "ops",
        _q(f"sum by (reason) (rate(evalstream_events_skipped_total[{RATE}]))", "{{reason}}")))
    board = board.with_panel(_ts(
        "Messages consumed and events decoded", "Intake per second.", "ops",
        _q(f"sum by (topic) (rate(evalstream_messages_consumed_total[{RATE}]))",
           "consumed {{topic}}", "A"),
        _q(f"sum by (format) (rate(evalstream_events_decoded_total[{RATE}]))",
           "decoded {{format}}", "B")))
    board = board.with_panel(_ts(
        "Label mix (label evaluators)", "Labels per second from topic/sentiment evaluators.",
        "ops",
        _q(f"sum by (evaluator, label) (rate(evalstream_labels_total{{{SEL}}}[{RATE}]))",
           "{{evaluator}}: {{label}}")))

    board = board.with_row(dash.Row("Session windows"))
    board = board.with_panel(_ts(
        "Open session windows",
        "Sessions buffering events on routes with `session:`. max_open applies per replica "
        "and route: compare it with the busiest replica; at max_open the quietest session "
        "is evaluated early (reason capacity).", "short",
        _q('sum by (route) (evalstream_sessions_open{route=~"$route"})',
           "{{route}} all replicas", "A"),
        _q('max by (route) (evalstream_sessions_open{route=~"$route"})',
           "{{route}} busiest replica", "B"), width=8, lo=0))
    board = board.with_panel(_ts(
        "Session windows closed by reason",
        "gap (the conversation went quiet), max_events, max_age; capacity (max_open / "
        "max_bytes reached) and bytes (worker.max_message_bytes) evaluate early; abandoned: "
        "revoked or stopping, re-read and windowed again by the next owner.", "ops",
        _q(f'sum by (route, reason) (rate(evalstream_sessions_closed_total{{route=~"$route"}}'
           f"[{RATE}]))", "{{route}} {{reason}}"), width=8))
    board = board.with_panel(_ts(
        "Session windows cut short (1h)",
        "Share of a route's windows (abandoned ones aside) closed at capacity or bytes "
        "over the last hour, before the conversation ended. EvalstreamSessionsCutShort "
        "warns above 5% (with at least 20 windows closed).", "percentunit",
        _q('route_reason:evalstream_sessions_cut_short:ratio1h{route=~"$route"}',
           "{{route}} {{reason}}"), width=8, lo=0, hi=1))

    board = board.with_row(dash.Row("Judges"))
    board = board.with_panel(_ts(
        "Judge latency p50 / p95", "From evalstream_judge_latency_seconds.", "s",
        _q(f"histogram_quantile(0.5, sum by (judge, le) "
           f"(rate(evalstream_judge_latency_seconds_bucket[{RATE}])))", "p50 {{judge}}", "A"),
        _q(f"histogram_quantile(0.95, sum by (judge, le) "
           f"(rate(evalstream_judge_latency_seconds_bucket[{RATE}])))", "p95 {{judge}}", "B"),
        width=8))
    board = board.with_panel(_ts(
        "Judge cost (USD per hour)",
        "Estimated spend from token counts: by judge, and by route/evaluator (which check "
        "costs what).", "currencyUSD",
        _q(f"sum by (judge) (rate(evalstream_judge_cost_usd_total[{RATE}])) * 3600",
           "{{judge}}", "A"),
        _q(f"sum by (route, evaluator) (rate(evalstream_evaluation_cost_usd_total[{RATE}]))"
           f" * 3600", "{{route}}/{{evaluator}}", "B"), width=8))
    board = board.with_panel(_ts(
        "Judge requests by outcome",
        "Finished calls: ok, error (not retryable, or retries exhausted), deadline (no "
        "answer in time, e.g. while the circuit breaker is open). Attempts that go on: "
        "retry, rate_limited (HTTP 429). Refused, or held until the window has room "
        "(on_spend_cap: wait), unsent: capped (the judge's spend_cap_usd was reached).",
        "ops",
        _q(f"sum by (judge, outcome) (rate(evalstream_judge_requests_total[{RATE}]))",
           "{{judge}} {{outcome}}"), width=8))
    board = board.with_panel(_ts(
        "Judge paused by rate limiting",
        "Share of time each judge was paused after HTTP 429 (Retry-After; judge-wide), on "
        "the most paused replica: evaluations wait and the input topics lag meanwhile "
        "(rate_limit_retry: until_deadline). The EvalstreamJudgeRateLimited alert fires "
        "above 50% for 10 minutes.",
        "percentunit",
        _q(f"max by (judge) (rate(evalstream_judge_rate_limit_paused_seconds_total[{RATE}]))",
           "{{judge}}"), width=8, lo=0, hi=1))
    board = board.with_panel(_ts(
        "Judge answers given in JSON",
        "Share of each LLM judge's answers that were stated in JSON (0 or 1) rather than read "
        "from logprobs (graded): 1 for a judge set to logprobs: never; with logprobs: auto, a "
        "rise means the backend stopped giving logprobs. The EvalstreamJudgeLogprobsLost "
        "alert fires above 50% for 15 minutes when the judge answered from logprobs before.",
        "percentunit",
        _q(f'sum by (judge) (rate(evalstream_judge_answers_total{{source="json"}}[{RATE}])) '
           f"/ sum by (judge) (rate(evalstream_judge_answers_total[{RATE}]))",
           "{{judge}}"), width=8, lo=0, hi=1))

    board = board.with_row(dash.Row("Judge calibration (canaries)"))
    board = board.with_panel(_ts(
        "Canary agreement with gold answers (1h)",
        "Share of canaries (events with evalstream.canary=\"true\" and gold answers) whose "
        "result matched the gold answer over the last hour, all replicas, with the 95% "
        "Wilson upper bound the EvalstreamCanaryAgreementLow alert compares with its floor.",
        "percentunit",
        _q(f"route_evaluator_judge:evalstream_canary_agreement:ratio1h{{{SEL}}}",
           "{{route}} / {{evaluator}} ({{judge}})", "A"),
        _q(f"route_evaluator_judge:evalstream_canary_agreement:upper95_1h{{{SEL}}}",
           "upper {{route}} / {{evaluator}} ({{judge}})", "B"),
        width=8, lo=0, hi=1))
    board = board.with_panel(_ts(
        "Canary Brier score and ECE (1h)",
        "Mean Brier score of the judge's probabilities against the gold answers, and the "
        "expected calibration error over 10 confidence bins (lower is better for both).",
        "short",
        _q(f"route_evaluator_judge:evalstream_canary_brier:mean1h{{{SEL}}}",
           "Brier {{route}} / {{evaluator}} ({{judge}})", "A"),
        _q(f"route_evaluator_judge:evalstream_canary_ece:ratio1h{{{SEL}}}",
           "ECE {{route}} / {{evaluator}} ({{judge}})", "B"),
        width=8, lo=0))
    board = board.with_panel(_ts(
        "Canary evaluations by outcome",
        "agreed / disagreed with the gold answer; no_gold, invalid_gold (no usable gold "
        "answer for the evaluator), unscored (nothing to compare), error, skipped. Canaries "
        "never count in the pass rates above.", "ops",
        _q(f"sum by (route, evaluator, judge, outcome) "
           f"(rate(evalstream_canary_evaluations_total{{{SEL}}}[{RATE}]))",
           "{{route}} / {{evaluator}} ({{judge}}) {{outcome}}"), width=8))

    board = board.with_row(dash.Row("Judge calibration (human labels)"))
    board = board.with_panel(_ts(
        "Agreement with human labels (1d)",
        "Share of results joined with a human label (evalstream join-labels) whose "
        "prediction matched it over the last day.", "percentunit",
        _q(f"route_evaluator_judge:evalstream_labels_agreement:ratio1d{{{SEL}}}",
           "{{route}} / {{evaluator}} ({{judge}})"), width=8, lo=0, hi=1))
    board = board.with_panel(_ts(
        "Brier score and ECE against human labels (1d)",
        "Mean Brier score and expected calibration error (10 confidence bins) of the "
        "judge against human labels (lower is better for both).", "short",
        _q(f"route_evaluator_judge:evalstream_labels_brier:mean1d{{{SEL}}}",
           "Brier {{route}} / {{evaluator}} ({{judge}})", "A"),
        _q(f"route_evaluator_judge:evalstream_labels_ece:ratio1d{{{SEL}}}",
           "ECE {{route}} / {{evaluator}} ({{judge}})", "B"),
        width=8, lo=0))
    board = board.with_panel(_ts(
        "Human labels joined and lost",
        "Labels compared with their result by outcome, and labels dropped before their "
        "result came (expired, evicted, revoked: see labels.retention_s and max_results).",
        "ops",
        _q(f"sum by (route, evaluator, judge, outcome) "
           f"(rate(evalstream_labels_evaluations_total{{{SEL}}}[{RATE}]))",
           "{{route}} / {{evaluator}} ({{judge}}) {{outcome}}", "A"),
        _q(f"sum by (reason) (rate(evalstream_labels_unmatched_total{{kind=\"label\"}}"
           f"[{RATE}]))", "labels {{reason}}", "B"), width=8))

    board = board.with_row(dash.Row("Pipeline health"))
    board = board.with_panel(_ts(
        "Consumer lag (messages)",
        "Messages not yet done, summed per topic (held in session windows included: up to "
        "max_age_s of a session route's traffic). The label joiner's topics (results, "
        "labels) show here too: it holds results up to labels.retention_s for their labels.",
        "short",
        _q("sum by (topic) (evalstream_consumer_lag_messages)", "{{topic}}"), width=8))
    board = board.with_panel(_ts(
        "Dead letters by reason", "Messages sent to the dead-letter topic.", "ops",
        _q(f"sum by (reason) (rate(evalstream_dead_letters_total[{RATE}]))", "{{reason}}"),
        width=8))
    board = board.with_panel(_ts(
        "In-flight evaluations and end-to-end lag p95", "Backpressure and freshness.",
        "short",
        _q("sum(evalstream_in_flight_evaluations)", "in flight", "A"),
        _q(f"histogram_quantile(0.95, sum by (le) "
           f"(rate(evalstream_end_to_end_lag_seconds_bucket[{RATE}])))", "e2e lag p95 (s)",
           "B"), width=8))
    # Counts, not a rate: a few copies an hour would read as a flat line near 0 ops.
    board = board.with_panel(_ts(
        "OTel result copies given up (15m)",
        "OpenTelemetry copies of results (topics.otel_results) the broker refused for good "
        "(too large, a topic policy): their results are published, the OTel topic misses "
        "them. Any is EvalstreamOtelResultsRejected; otel_result_rejected log lines name "
        "the result_id and the error.",
        "short",
        _q("sum(increase(evalstream_otel_results_rejected_total[15m]))", "given up"),
        width=8, lo=0))

    board = board.with_row(dash.Row("Drift"))
    board = board.with_panel(_stat(
        "Drift alerts firing", "Detectors currently firing on any replica.", "short",
        _q(f"sum(max by (route, evaluator, kind) "
           f"(evalstream_drift_alert_firing{{{SEL}}})) or vector(0)", "firing")))
    board = board.with_panel(_stat(
        "Prometheus alerts firing", "evalstream alerting rules in state firing.", "short",
        _q('count(ALERTS{alertname=~"Evalstream.*", alertstate="firing"}) or vector(0)',
           "firing")))
    board = board.with_panel(_stat(
        "Alert events published (24h)", "Firing and resolved events on the alerts topic.",
        "short", _q("sum(increase(evalstream_alerts_total[24h])) or vector(0)", "events"),
        width=12))
    board = board.with_panel(_ts(
        "Drift alert state", "1 while the worker's detector fires.", "short",
        _q(f"max by (route, evaluator, kind) (evalstream_drift_alert_firing{{{SEL}}})",
           "{{route}} / {{evaluator}} {{kind}}"), width=8, lo=0, hi=1))
    board = board.with_panel(_ts(
        "CUSUM statistic", "Log-likelihood ratio; the alert fires at its threshold.", "short",
        _q(f"max by (route, evaluator, detector) (evalstream_drift_statistic{{{SEL}}})",
           "{{route}} / {{evaluator}} {{detector}}"), width=8))
    board = board.with_panel(_ts(
        "Baseline pass rate", "Learned from warm-up or configured.", "percentunit",
        _q(f"avg by (route, evaluator) (evalstream_drift_baseline_pass_rate{{{SEL}}})",
           "{{route}} / {{evaluator}}"), width=8, lo=0, hi=1))

    data: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return data


def render() -> str:
    """The dashboard JSON text as written to disk (stable: sorted keys, indented)."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    """Write (or with ``--check`` verify) the dashboard and the Helm copies."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="verify only; exit 1 if stale")
    args = ap.parse_args()
    wanted = {
        DASHBOARD: render(),
        HELM_DASHBOARD: render(),
        HELM_RULES: RULES.read_text(encoding="utf-8"),
    }
    stale = [p for p, text in wanted.items()
             if not p.exists() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)} (run deploy/grafana/generate.py)",
                  file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(wanted[p], encoding="utf-8")
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
