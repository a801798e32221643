"""The drift engine: which results count, label-share detection, alert contents."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from evalstream.config.drift import DriftSettings
from evalstream.drift import DriftEngine
from evalstream.events import EvalResult


def result(passed: bool | None, *, route: str = "chat", evaluator: str = "refusal",
           label: str | None = None, status: str = "ok", rate: float = 1.0) -> EvalResult:
    return EvalResult.model_validate({
        "result_id": "x", "event_id": "e", "trace_id": "t", "route": route,
        "evaluator": evaluator, "passed": passed, "label": label, "status": status,
        "sample_rate": rate,
    })


SETTINGS = DriftSettings(warmup_samples=200, min_detect_samples=20, arl0=1e5,
                         windows_s=[60, 600], bucket_s=1, min_samples=30)


def test_errors_and_verdictless_results_do_not_count() -> None:
    engine = DriftEngine(SETTINGS)
    for i in range(100):
        engine.observe(result(None, status="error"), float(i))
        engine.observe(result(None), float(i))
    assert list(engine.pass_rates(100.0)) == []
    assert list(engine.detectors()) == []
    for i in range(40):
        engine.observe(result(True), 100.0 + i * 0.5)
    rates = {w: s for _, _, w, s in engine.pass_rates(120.0)}
    assert rates["1m"].n == 40
    assert rates["1m"].rate == pytest.approx(1.0)


def test_pass_rate_drop_alert_fires_and_resolves_with_all_fields() -> None:
    rng = random.Random(5)
    engine = DriftEngine(SETTINGS)
    t = 1_700_000_000.0
    for _ in range(600):  # warm-up and a quiet period at 95%
        engine.observe(result(rng.random() < 0.95), t)
        t += 0.5
    assert engine.drain_alerts(t) == []
    while not any(d.firing for d in engine.detectors()):
        engine.observe(result(rng.random() < 0.40), t)
        t += 0.5
    for _ in range(120):  # let the 1-minute window fill with the bad period
        engine.observe(result(rng.random() < 0.40), t)
        t += 0.5
    [firing] = engine.drain_alerts(t)
    assert firing.state == "firing"
    assert (firing.route, firing.evaluator, firing.kind) == ("chat", "refusal",
                                                             "pass_rate_drop")
    assert firing.baseline == pytest.approx(0.95, abs=0.04)
    assert firing.current is not None
    assert firing.current < 0.8
    assert firing.interval is not None
    assert firing.interval[0] <= firing.current <= firing.interval[1]
    assert firing.n >= 30
    assert firing.statistic is not None
    assert firing.threshold is not None
    assert firing.statistic >= firing.threshold
    assert firing.first_seen.tzinfo is UTC
    assert firing.first_seen <= firing.at
    assert firing.severity == "critical"  # 40% is far below 95% - 20 points
    # The summary names the CUSUM as what decided; the window's figures are context.
    assert firing.summary.startswith(
        f"pass rate of refusal on route chat dropped below its baseline "
        f"{firing.baseline:.1%} (CUSUM past its threshold); last ")
    assert engine.drain_alerts(t) == []  # drained once
    while any(d.firing for d in engine.detectors()):
        engine.observe(result(rng.random() < 0.95), t)
        t += 0.5
    [resolved] = engine.drain_alerts(t)
    assert resolved.state == "resolved"
    assert resolved.summary.startswith(
        f"pass rate of refusal on route chat no longer below its baseline "
        f"{firing.baseline:.1%} (CUSUM evidence gone); last ")
    # The window still holds part of the 40% episode: the summary says so rather than
    # reading "back to 95%" next to a window rate far below it.
    assert resolved.current is not None
    assert resolved.current < firing.baseline
    assert ", which still holds part of the change: " in resolved.summary
    assert resolved.alert_id == firing.alert_id
    assert resolved.first_seen == firing.first_seen
    assert resolved.at > firing.at
    assert resolved.at == datetime.fromtimestamp(resolved.at.timestamp(), UTC)


def test_off_topic_share_spike_fires_label_share_alert() -> None:
    rng = random.Random(8)
    engine = DriftEngine(SETTINGS)
    topics = ["billing", "shipping", "returns"]
    t = 0.0
    for _ in range(500):
        label = "other" if rng.random() < 0.05 else rng.choice(topics)
        engine.observe(result(None, evaluator="topic", label=label), t)
        t += 0.25
    assert engine.drain_alerts(t) == []
    for _ in range(400):  # a third of conversations go off-topic
        label = "other" if rng.random() < 0.35 else rng.choice(topics)
        engine.observe(result(None, evaluator="topic", label=label), t)
        t += 0.25
    alerts = engine.drain_alerts(t)
    # The watched share rose, and with it the whole mix moved.
    assert sorted(a.kind for a in alerts) == ["label_mix", "label_share"]
    alert = next(a for a in alerts if a.kind == "label_share")
    assert alert.evaluator == "topic"
    assert alert.baseline == pytest.approx(0.05, abs=0.04)
    assert alert.current is not None
    assert alert.current > 0.2
    assert "share of label 'other'" in alert.summary


def test_unwatched_labels_are_ignored_and_other_routes_are_separate() -> None:
    engine = DriftEngine(SETTINGS)
    for i in range(300):
        engine.observe(result(True, evaluator="refusal", label="refused"), float(i))
        engine.observe(result(i % 2 == 0, route="rag"), float(i))
    kinds = sorted((d.route, d.kind) for d in engine.detectors())
    assert kinds == [("chat", "pass_rate_drop"), ("rag", "pass_rate_drop")]
    rates = {(r, w): s.rate for r, _, w, s in engine.pass_rates(299.0)}
    assert rates[("chat", "1m")] == pytest.approx(1.0)
    assert rates[("rag", "1m")] == pytest.approx(0.5)


def test_configured_baseline_per_route_and_evaluator() -> None:
    settings = SETTINGS.model_copy(update={"baselines": {"chat/refusal": 0.9, "refusal": 0.8}})
    engine = DriftEngine(settings)
    engine.observe(result(True), 0.0)
    engine.observe(result(True, route="rag"), 0.0)
    baselines = {d.route: d.baseline_bad for d in engine.detectors()}
    assert baselines["chat"] == pytest.approx(0.1)
    assert baselines["rag"] == pytest.approx(0.2)


def test_label_mix_shift_without_more_other_fires_only_the_mix_test() -> None:
    rng = random.Random(11)
    engine = DriftEngine(SETTINGS)
    t = 0.0

    def feed(n: int, weights: dict[str, float]) -> list[str]:
        nonlocal t
        kinds: list[str] = []
        labels, w = list(weights), list(weights.values())
        for _ in range(n):
            label = rng.choices(labels, w)[0]
            engine.observe(result(None, evaluator="topic", label=label), t)
            t += 0.25
            if int(t * 4) % 4 == 0:  # the monitor ticks once a second
                kinds += [f"{a.kind}:{a.state}" for a in engine.drain_alerts(t)]
        return kinds

    assert feed(800, {"billing": 0.6, "shipping": 0.35, "other": 0.05}) == []
    # Billing questions turn into shipping complaints; "other" stays at 5%.
    fired = feed(400, {"billing": 0.2, "shipping": 0.75, "other": 0.05})
    assert fired == ["label_mix:firing"]
    mix = next(d for d in engine.detectors() if d.kind == "label_mix")
    assert mix.statistic is not None
    assert mix.statistic > 30
    resolved = feed(800, {"billing": 0.6, "shipping": 0.35, "other": 0.05})
    assert resolved == ["label_mix:resolved"]


def test_a_mix_learned_with_one_label_resolves_when_traffic_is_back_to_that_label() -> None:
    # Warm-up saw only "neutral"; a spike brings "negative". Back to all-neutral, both sides
    # hold one label: was "nothing to compare" (no test), so the alert fired for good.
    engine = DriftEngine(SETTINGS)
    t = 0.0

    def feed(n: int, label: str) -> list[str]:
        nonlocal t
        states: list[str] = []
        for _ in range(n):
            engine.observe(result(None, evaluator="sentiment", label=label), t)
            t += 0.25
            states += [a.state for a in engine.drain_alerts(t) if a.kind == "label_mix"]
        return states

    assert feed(400, "neutral") == []
    assert feed(200, "negative") == ["firing"]
    assert feed(400, "neutral") == ["resolved"]
    assert not any(d.firing for d in engine.detectors())  # the share alert resolved too
    mix = next(d for d in engine.detectors() if d.kind == "label_mix")
    assert (mix.statistic, mix.threshold()) == (0.0, None)


def test_label_mix_alert_contents() -> None:
    engine = DriftEngine(SETTINGS)
    for i in range(200):
        engine.observe(result(None, evaluator="sentiment",
                              label="positive" if i % 2 else "neutral"), i * 0.1)
    assert engine.drain_alerts(20.0) == []
    assert engine.drain_alerts(100.0) == []  # an empty window is no evidence of anything
    for i in range(60):
        engine.observe(result(None, evaluator="sentiment", label="negative"), 100 + i * 0.1)
    alerts = {a.kind: a for a in engine.drain_alerts(106.0)}
    mix = alerts["label_mix"]
    assert mix.state == "firing"
    assert mix.severity == "info"
    assert mix.n == 60  # the 1-minute window holds only the new labels
    assert mix.current == pytest.approx(1.0)
    assert mix.baseline is not None
    assert mix.baseline < 0.01
    assert mix.statistic is not None
    assert mix.threshold is not None
    assert mix.statistic > mix.threshold
    assert "most changed label 'negative'" in mix.summary


def test_stale_resolve_resets_the_cusum_so_returning_healthy_traffic_does_not_refire() -> None:
    settings = SETTINGS.model_copy(update={"baselines": {"refusal": 0.9},
                                           "stale_after_s": 3600.0})
    engine = DriftEngine(settings)
    t = 0.0
    for i in range(400):  # an incident: half the evaluations fail
        t += 1
        engine.observe(result(i % 2 == 0), t)
    assert [a.state for a in engine.drain_alerts(t)] == ["firing"]
    t += 4000  # a quiet night
    [stale] = engine.drain_alerts(t)
    assert (stale.state, "stale" in stale.summary) == ("resolved", True)
    det = next(d for d in engine.detectors() if d.kind == "pass_rate_drop")
    assert det.statistic == 0
    for _ in range(200):  # traffic returns, healthy
        t += 1
        engine.observe(result(True), t)
        assert engine.drain_alerts(t) == []


@pytest.mark.parametrize("seed", [1, 2])
def test_stationary_mix_of_more_labels_than_kept_does_not_fire(seed: int) -> None:
    # 80 labels: those past MAX_LABELS share the overflow bucket, in the baseline as in the
    # live window. And the baseline of 1,000 is a sample too: tested as exact proportions,
    # its noise made this unchanged mix fire after ~3,000 results and never resolve.
    rng = random.Random(seed)
    labels = [f"l{i}" for i in range(80)]
    engine = DriftEngine(SETTINGS.model_copy(update={"warmup_samples": 1000,
                                                     "watch_labels": {"cls": "l0"}}))
    t = 1_700_000_000.0
    alerts = []
    for i in range(20000):
        t += 0.1
        engine.observe(result(None, evaluator="cls", label=rng.choice(labels)), t)
        if i % 10 == 0:
            alerts += engine.drain_alerts(t)
    mix = next(d for d in engine.detectors() if d.kind == "label_mix")
    assert mix.statistic is not None  # the test did run
    assert [(a.kind, a.summary) for a in alerts] == []


def test_hand_over_resolves_a_firing_label_mix_under_its_own_id() -> None:
    engine = DriftEngine(SETTINGS)
    for i in range(200):
        engine.observe(result(None, evaluator="sentiment",
                              label="positive" if i % 2 else "neutral"), i * 0.1)
    for i in range(60):
        engine.observe(result(None, evaluator="sentiment", label="negative"), 100 + i * 0.1)
    firing = {a.kind: a for a in engine.drain_alerts(106.0)}
    handed = {a.kind: a for a in engine.hand_over(107.0)}
    assert set(handed) == set(firing)
    for kind, alert in handed.items():
        assert alert.state == "resolved"
        assert alert.alert_id == firing[kind].alert_id
        assert "handed over at shutdown" in alert.summary
    assert engine.hand_over(108.0) == []  # nothing firing any more


def test_a_restart_mid_incident_learns_the_drift_and_the_hand_over_says_so() -> None:
    """State is not kept: a worker started while the pass rate is down learns the drifted
    rate as its baseline and stays quiet (a configured baseline still fires). The hand-over
    summary must not promise that the next worker fires again."""
    def run(settings: DriftSettings) -> list[str]:
        rng, engine, states = random.Random(3), DriftEngine(settings), []
        for i in range(2000):
            engine.observe(result(rng.random() < 0.6), 1_700_000_000.0 + i)
            states += [a.state for a in engine.drain_alerts(1_700_000_000.0 + i)]
        return states
    assert run(SETTINGS) == []
    assert run(SETTINGS.model_copy(update={"baselines": {"refusal": 0.9}}))[:1] == ["firing"]
    engine = DriftEngine(SETTINGS.model_copy(update={"baselines": {"refusal": 0.9}}))
    for i in range(200):
        engine.observe(result(False), float(i))
    assert [a.state for a in engine.drain_alerts(200.0)] == ["firing"]
    [handed] = engine.hand_over(201.0)
    assert "may fire again" not in handed.summary
    assert "relearns its baseline" in handed.summary
    assert "drift.baselines" in handed.summary


def test_a_label_mix_alert_resolves_when_its_window_stays_too_thin_to_test() -> None:
    """Traffic falling below min_samples per window left label_mix firing for good: with
    no test there was no resolve, and a stream with a result now and then is never
    'quiet'. Untestable for stale_after_s, it resolves as stale, as a silent one does."""
    rng = random.Random(2)
    engine = DriftEngine(SETTINGS)  # 1-minute mix window, min_samples 30, stale after 1h
    t, states = 0.0, []
    for i in range(600):  # warm-up at 4/s, then "negative" takes over
        label = "negative" if i >= 400 else rng.choice(["positive", "neutral"])
        engine.observe(result(None, evaluator="sentiment", label=label), t)
        t += 0.25
        states += [a.state for a in engine.drain_alerts(t) if a.kind == "label_mix"]
    assert states == ["firing"]
    later = []
    for _ in range(60 * 3):  # three hours at one result a minute, back to the old mix
        t += 60
        engine.observe(result(None, evaluator="sentiment",
                              label=rng.choice(["positive", "neutral"])), t)
        later += [a for a in engine.drain_alerts(t) if a.kind == "label_mix"]
    assert states + [a.state for a in later] == ["firing", "resolved"]
    assert later[0].summary.endswith("stale, no window of 30+ labels to test for 3600 s")
    mix = next(d for d in engine.detectors() if d.kind == "label_mix")
    assert not mix.firing
