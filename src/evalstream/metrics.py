"""Every Prometheus metric evalstream exports, on an injected ``CollectorRegistry``.

Names are ``evalstream_*`` with units in the name; label values come from configuration
(route, evaluator, judge, topic) or from small fixed sets (outcome, reason). Values outside
the configured set collapse to ``other`` so a bad event can never blow up cardinality.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

__all__ = ["LabelSet", "Metrics"]

# Judge calls take seconds to minutes: a request's deadline_s defaults to 300 s, a cascade
# adds its steps. A value past the last finite edge reads as that edge in a quantile, so
# with 60 s last a judge incident's p95 flatlined at 60 s.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
                    600)
# Up to a day: a consumer stuck for hours, or a replay (kafka.start_from), is measured too.
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400)
_SCORE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)


class LabelSet:
    """A closed set of label values; anything else reads as ``other``."""

    def __init__(self, allowed: Iterable[str]) -> None:
        self._allowed = frozenset(allowed)

    def __call__(self, value: str | None) -> str:
        """Return ``value`` if it is allowed, else ``"other"``."""
        return value if value is not None and value in self._allowed else "other"


class Metrics:
    """The metric container. Create one per worker (tests create their own registry)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        self.build_info = Info("evalstream_build", "Version of the running worker.", registry=r)
        self.ready = Gauge("evalstream_ready", "1 when connected and assigned partitions.",
                           registry=r)

        # --- intake -------------------------------------------------------------------
        self.messages_consumed = Counter(
            "evalstream_messages_consumed_total", "Kafka messages read.", ["topic"], registry=r)
        self.events_decoded = Counter(
            "evalstream_events_decoded_total", "Trace events decoded from messages.",
            ["format"], registry=r)
        self.dead_letters = Counter(
            "evalstream_dead_letters_total", "Messages sent to the dead-letter topic.",
            ["reason"], registry=r)
        self.events_skipped = Counter(
            "evalstream_events_skipped_total",
            "Events or spans not evaluated, by reason (sampling, no_route, no_content, ...).",
            ["reason"], registry=r)
        self.events_sampled = Counter(
            "evalstream_events_sampled_total", "Events selected by sampling, per route.",
            ["route"], registry=r)
        self.consumer_lag = Gauge(
            "evalstream_consumer_lag_messages",
            "Messages not yet done, per partition: end offset minus the lowest offset whose "
            "work is incomplete (fetched and waiting, in flight or held count).",
            ["topic", "partition"], registry=r)
        self.paused = Gauge(
            "evalstream_consumer_paused", "1 while intake is paused by backpressure.", registry=r)
        self.backpressure_pauses = Counter(
            "evalstream_backpressure_pauses_total", "Times intake paused at max_in_flight.",
            registry=r)

        # --- evaluation ---------------------------------------------------------------
        self.in_flight = Gauge(
            "evalstream_in_flight_evaluations", "Evaluations started and not finished.",
            registry=r)
        self.in_flight_peak = Gauge(
            "evalstream_in_flight_evaluations_peak", "Highest in-flight count seen.",
            registry=r)
        self.evaluations = Counter(
            "evalstream_evaluations_total",
            "Evaluations by outcome (passed, failed, labelled, error, skipped).",
            ["route", "evaluator", "outcome"], registry=r)
        self.evaluations_weighted = Counter(
            "evalstream_evaluations_weighted_total",
            "Evaluations by outcome weighted by 1/sample_rate (unbiased pass rates).",
            ["route", "evaluator", "outcome"], registry=r)
        # Sums of squared weights, per outcome: with the weighted sums, Kish's effective
        # sample size (sum w)^2 / sum w^2 (the rules' minimum-n guards) and the linearised
        # one (their Wilson bounds take the smaller), so bounds over a series mixing sample
        # rates (route strata) are not too narrow. For one rate both equal the count.
        self.evaluations_weight_squared = Counter(
            "evalstream_evaluations_weight_squared_total",
            "Evaluations by outcome, each counted as (1/sample_rate)^2 (effective sample "
            "size of the weighted pass rates).",
            ["route", "evaluator", "outcome"], registry=r)
        self.labels = Counter(
            "evalstream_labels_total", "Labels assigned by label evaluators (topic, sentiment).",
            ["route", "evaluator", "label"], registry=r)
        self.labels_weighted = Counter(
            "evalstream_labels_weighted_total",
            "Labels assigned by label evaluators, each weighted by 1/sample_rate (unbiased "
            "label shares).",
            ["route", "evaluator", "label"], registry=r)
        self.evaluation_cost = Counter(
            "evalstream_evaluation_cost_usd_total",
            "Estimated judge spend of published results in USD, by route and evaluator "
            "(which check costs what; evalstream_judge_cost_usd_total is by judge).",
            ["route", "evaluator"], registry=r)
        self.scores = Histogram(
            "evalstream_score", "Scores (probability of the good outcome).",
            ["route", "evaluator"], buckets=_SCORE_BUCKETS, registry=r)
        self.evaluation_seconds = Histogram(
            "evalstream_evaluation_duration_seconds", "Time to evaluate one event.",
            ["evaluator"], buckets=_LATENCY_BUCKETS, registry=r)
        self.end_to_end_lag = Histogram(
            "evalstream_end_to_end_lag_seconds", "From the event's time to its result.",
            buckets=_LAG_BUCKETS, registry=r)

        # --- session windows (routes with `session:`) -------------------------------------
        self.sessions_open = Gauge(
            "evalstream_sessions_open", "Session windows open (buffering events), per route.",
            ["route"], registry=r)
        self.sessions_closed = Counter(
            "evalstream_sessions_closed_total",
            "Session windows closed, by reason: evaluated after the gap, at max_events, at "
            "max_age, early at capacity (max_open / max_bytes) or bytes (one session's limit); "
            "abandoned (revoked or stopping: redelivered, never evaluated here).",
            ["route", "reason"], registry=r)

        # --- output -------------------------------------------------------------------
        self.results_published = Counter(
            "evalstream_results_published_total", "Results acknowledged by the broker.",
            ["status"], registry=r)
        self.otel_results_rejected = Counter(
            "evalstream_otel_results_rejected_total",
            "OTel copies of results (topics.otel_results) the broker refused for good, given "
            "up; their results are published.", registry=r)
        self.commits = Counter(
            "evalstream_offset_commits_total", "Offset commits.", ["outcome"], registry=r)
        # An observer that fails leaves what it exports (the drift monitor's pass-rate and
        # drift gauges) at its last values; its log lines are rate-limited.
        self.observer_failures = Counter(
            "evalstream_observer_failures_total",
            "Result observer failures (the drift monitor: its pass-rate and drift gauges "
            "stop moving), in observing a result or in its background run.",
            ["observer"], registry=r)

        # --- judges -------------------------------------------------------------------
        self.judge_requests = Counter(
            "evalstream_judge_requests_total",
            "Judge HTTP requests; capped ones were refused unsent at the judge's spend cap, "
            "or held unsent until it had room with on_spend_cap: wait. "
            "By outcome (ok, retry, rate_limited, error, deadline, capped).",
            ["judge", "outcome"], registry=r)
        self.judge_latency = Histogram(
            "evalstream_judge_latency_seconds", "Judge request latency.", ["judge"],
            buckets=_LATENCY_BUCKETS, registry=r)
        self.judge_tokens = Counter(
            "evalstream_judge_tokens_total", "Tokens sent and received.",
            ["judge", "direction"], registry=r)
        self.judge_cost = Counter(
            "evalstream_judge_cost_usd_total", "Estimated judge spend in USD.", ["judge"],
            registry=r)
        self.judge_spend_window = Gauge(
            "evalstream_judge_spend_window_usd",
            "Estimated judge spend in USD within its spend cap window (this replica).",
            ["judge"], registry=r)
        self.judge_spend_cap_waiting = Gauge(
            "evalstream_judge_spend_cap_waiting_requests",
            "Judge requests waiting at the spend cap for spend to leave its window "
            "(on_spend_cap: wait; this replica).",
            ["judge"], registry=r)
        self.judge_rate_limit_pause = Gauge(
            "evalstream_judge_rate_limit_pause_seconds",
            "Seconds left of the judge-wide pause after rate limiting (HTTP 429): no request "
            "goes to the judge until then; 0 when not paused (this replica).",
            ["judge"], registry=r)
        self.judge_rate_limit_paused = Counter(
            "evalstream_judge_rate_limit_paused_seconds_total",
            "Seconds the judge was paused by rate limiting (HTTP 429), counted as each pause "
            "is set or extended (this replica).",
            ["judge"], registry=r)
        self.judge_answers = Counter(
            "evalstream_judge_answers_total",
            "Closed questions an LLM judge answered (not from its cache), by how it gave the "
            "probabilities: logprobs (graded) or json (a stated answer, 0 or 1; logprobs: auto "
            "falls back to it when a backend gives none).",
            ["judge", "source"], registry=r)
        self.judge_cache_hits = Counter(
            "evalstream_judge_cache_hits_total", "Judge answers served from the cache.",
            ["judge"], registry=r)
        self.judge_circuit_state = Gauge(
            "evalstream_judge_circuit_state", "0 closed, 1 half-open, 2 open.", ["judge"],
            registry=r)
        self.judge_in_flight = Gauge(
            "evalstream_judge_in_flight_requests", "Judge requests in flight.", ["judge"],
            registry=r)
        self.judge_escalations = Counter(
            "evalstream_judge_escalations_total",
            "Cascade decisions: answered by the first judge, escalated when it was unsure, "
            "unsupported (the first judge cannot take the request; the second answers), "
            "or capped (escalation refused by the second judge's spend cap; the first "
            "judge's answer stands).",
            ["judge", "decision"], registry=r)

        # --- canaries: the judge checked against gold answers in the stream --------------
        # Canary results count here and nowhere above (no outcome, weighted, score or
        # label series, no pass-rate window): they are not sampled like traffic. Sums, not
        # gauges, so Prometheus can compute agreement, Brier and ECE over any window.
        self.canary_evaluations = Counter(
            "evalstream_canary_evaluations_total",
            "Canary evaluations by outcome (agreed, disagreed with the gold answer; "
            "no_gold, invalid_gold, unscored, error, skipped).",
            ["route", "evaluator", "judge", "outcome"], registry=r)
        self.canary_brier = Counter(
            "evalstream_canary_brier_total",
            "Sum of the Brier scores of canary results compared with their gold answer.",
            ["route", "evaluator", "judge"], registry=r)
        self.canary_bin_results = Counter(
            "evalstream_canary_calibration_results_total",
            "Compared canary results per confidence bin (bin = lower edge of a 0.1-wide bin "
            "of the confidence in the predicted class).",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.canary_bin_confidence = Counter(
            "evalstream_canary_calibration_confidence_total",
            "Sum of the confidence in the predicted class of compared canary results, per "
            "confidence bin.",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.canary_bin_correct = Counter(
            "evalstream_canary_calibration_correct_total",
            "Compared canary results whose prediction matched the gold answer, per "
            "confidence bin.",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.canary_gold_ignored = Counter(
            "evalstream_canary_gold_ignored_total",
            "Canary markings not used, by reason (unknown_evaluator: a gold attribute names "
            "no evaluator the canary went to; not_canary: gold on an event not marked as a "
            "canary; no_route: a canary matching no route; invalid_marker: evalstream.canary "
            "neither true nor false).",
            ["reason"], registry=r)

        # --- human labels joined with results (``evalstream join-labels``) ---------------
        # The canary sums again, for results compared with a human label: separate series,
        # so the canary rules and alert keep meaning "gold events", and a support team's
        # labels (chosen, not sampled) never mix into them.
        self.labels_evaluations = Counter(
            "evalstream_labels_evaluations_total",
            "Results joined with a human label, by outcome (agreed, disagreed with the label; "
            "invalid_gold, unscored, error).",
            ["route", "evaluator", "judge", "outcome"], registry=r)
        self.labels_brier = Counter(
            "evalstream_labels_brier_total",
            "Sum of the Brier scores of results compared with their human label.",
            ["route", "evaluator", "judge"], registry=r)
        self.labels_bin_results = Counter(
            "evalstream_labels_calibration_results_total",
            "Results compared with a human label per confidence bin (bin = lower edge of a "
            "0.1-wide bin of the confidence in the predicted class).",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.labels_bin_confidence = Counter(
            "evalstream_labels_calibration_confidence_total",
            "Sum of the confidence in the predicted class of results compared with a human "
            "label, per confidence bin.",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.labels_bin_correct = Counter(
            "evalstream_labels_calibration_correct_total",
            "Results whose prediction matched their human label, per confidence bin.",
            ["route", "evaluator", "judge", "bin"], registry=r)
        self.labels_ignored = Counter(
            "evalstream_labels_ignored_total",
            "Messages the label joiner did not use, by kind (label, result) and reason "
            "(undecodable; unknown_evaluator: a result of a route/evaluator not in the "
            "config; canary: a canary's result, checked against its own gold by the worker; "
            "duplicate: a second label for a result, or a result read again).",
            ["kind", "reason"], registry=r)
        self.labels_unmatched = Counter(
            "evalstream_labels_unmatched_total",
            "Labels and results dropped before they met their other half, by kind (label, "
            "result) and reason (expired: older than labels.retention_s; evicted: the store "
            "was full; revoked: the partition went to another joiner).",
            ["kind", "reason"], registry=r)
        self.labels_pending = Gauge(
            "evalstream_labels_pending",
            "Labels and results held by the label joiner waiting for their other half.",
            ["kind"], registry=r)

        # --- live pass rates and drift --------------------------------------------------
        self.pass_rate = Gauge(
            "evalstream_pass_rate", "Weighted pass rate over a sliding window (NaN: too few).",
            ["route", "evaluator", "window"], registry=r)
        self.pass_rate_lower = Gauge(
            "evalstream_pass_rate_lower", "Lower 95% Wilson bound of the pass rate.",
            ["route", "evaluator", "window"], registry=r)
        self.pass_rate_upper = Gauge(
            "evalstream_pass_rate_upper", "Upper 95% Wilson bound of the pass rate.",
            ["route", "evaluator", "window"], registry=r)
        self.pass_rate_samples = Gauge(
            "evalstream_pass_rate_samples", "Evaluations in the window (unweighted).",
            ["route", "evaluator", "window"], registry=r)
        self.drift_baseline = Gauge(
            "evalstream_drift_baseline_pass_rate", "Baseline the drift detector compares to.",
            ["route", "evaluator"], registry=r)
        self.drift_statistic = Gauge(
            "evalstream_drift_statistic", "Detector statistic (CUSUM, chi-square, ...).",
            ["route", "evaluator", "detector"], registry=r)
        self.drift_firing = Gauge(
            "evalstream_drift_alert_firing", "1 while a drift alert is firing.",
            ["route", "evaluator", "kind"], registry=r)
        self.alerts = Counter(
            "evalstream_alerts_total", "Alert events published.",
            ["route", "evaluator", "kind", "state"], registry=r)
