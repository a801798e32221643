"""Pure drift maths: Wilson intervals, bucketed windows, CUSUM design and detectors."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from structlog.testing import capture_logs

from evalstream.config.drift import DriftSettings
from evalstream.drift import (
    BernoulliCusum,
    Detector,
    LabelWindow,
    SlidingCounts,
    WindowStats,
    average_run_length,
    chi2_sf,
    cusum,
    design_cusum,
    format_window,
    g_test,
    learned_baseline,
    wilson_interval,
)
from evalstream.drift.mix import MAX_LABELS, MixDetector, chi2_isf


def test_wilson_matches_known_values() -> None:
    lo, hi = wilson_interval(0.5, 100)
    assert lo == pytest.approx(0.4038, abs=1e-4)
    assert hi == pytest.approx(0.5962, abs=1e-4)
    # At p = 0 the interval still has width (the normal approximation would be [0, 0]).
    lo, hi = wilson_interval(0.0, 10)
    assert lo == 0.0
    assert hi == pytest.approx(0.2775, abs=1e-4)
    # More data, narrower interval.
    assert wilson_interval(0.9, 1000)[0] > wilson_interval(0.9, 100)[0]
    with pytest.raises(ValueError, match="n > 0"):
        wilson_interval(0.5, 0)


def test_window_reports_not_enough_data_instead_of_zero() -> None:
    counts = SlidingCounts(bucket_s=1, horizon_s=60)
    empty = counts.stats(now=100.0, window_s=60, min_samples=5)
    assert empty == WindowStats(0, 0.0, 0.0, None, None, None)  # no weight, no n_eff either
    for i in range(4):
        counts.add(100.0 + i, hit=False)
    tiny = counts.stats(now=104.0, window_s=60, min_samples=5)
    assert tiny.n == 4
    assert tiny.rate is None
    assert not tiny.enough
    counts.add(104.0, hit=True)
    ok = counts.stats(now=104.0, window_s=60, min_samples=5)
    assert ok.rate == pytest.approx(0.2)
    assert ok.lower is not None
    assert ok.upper is not None
    assert ok.lower < 0.2 < ok.upper


def test_window_weights_by_inverse_sample_rate() -> None:
    counts = SlidingCounts(bucket_s=10, horizon_s=300)
    # 50 passes sampled at 100%, 50 failures sampled at 10%: each failure stands for 10.
    for i in range(50):
        counts.add(float(i), hit=True, weight=1.0)
        counts.add(float(i), hit=False, weight=10.0)
    stats = counts.stats(now=60.0, window_s=300, min_samples=10)
    assert stats.rate == pytest.approx(50 / 550)
    assert stats.n == 100
    # Kish's effective sample size: (sum w)^2 / sum w^2 = 550^2 / 5050.
    assert stats.n_eff == pytest.approx(550**2 / 5050)
    unweighted = wilson_interval(50 / 550, 100)
    assert stats.upper is not None
    assert stats.lower is not None
    assert stats.upper - stats.lower > unweighted[1] - unweighted[0]


def test_window_slides_and_memory_is_bounded() -> None:
    counts = SlidingCounts(bucket_s=10, horizon_s=300)
    for t in range(3000):  # 50 minutes, one observation a second
        counts.add(float(t), hit=t >= 2900)
    # Exactly the horizon's 30 buckets: "<= 31" let an off-by-one in pruning keep one more.
    assert len(counts) == 30
    last_100s = counts.stats(now=2999.0, window_s=100, min_samples=1)
    assert last_100s.n == 100
    assert last_100s.rate == pytest.approx(1.0)
    five_min = counts.stats(now=2999.0, window_s=300, min_samples=1)
    assert five_min.n == 300
    assert five_min.rate == pytest.approx(100 / 300)
    # Long after the last observation the window is empty again.
    assert counts.stats(now=4000.0, window_s=300, min_samples=1).n == 0


@pytest.mark.parametrize(("bucket_s", "horizon_s"), [(0, 60), (-1, 60), (10, 5)])
def test_window_rejects_a_bucket_wider_than_the_horizon_or_empty(bucket_s: int,
                                                                 horizon_s: int) -> None:
    with pytest.raises(ValueError, match="bucket_s"):
        SlidingCounts(bucket_s=bucket_s, horizon_s=horizon_s)
    SlidingCounts(bucket_s=10, horizon_s=10)  # one bucket is fine


def test_a_single_observation_is_enough_when_min_samples_is_one() -> None:
    counts = SlidingCounts(bucket_s=1, horizon_s=60)
    counts.add(10.0, hit=False)
    one = counts.stats(now=10.0, window_s=60, min_samples=1)
    assert (one.n, one.rate) == (1, 0.0)
    assert one.upper is not None
    assert one.upper > 0.0


def test_reading_a_quiet_window_drops_its_expired_buckets() -> None:
    # A stream that stopped keeps no buckets once it is read past the horizon.
    counts = SlidingCounts(bucket_s=10, horizon_s=60)
    for t in range(30):
        counts.add(float(t), hit=True)
    assert len(counts) == 3
    assert counts.stats(now=1000.0, window_s=60, min_samples=1).n == 0
    assert len(counts) == 0


def test_a_window_of_zero_weight_reports_no_rate_instead_of_dividing_by_zero() -> None:
    # A weight of 0 is accepted by ``add`` (an observation standing for no one): the window
    # then has observations but no weight, and Kish's n (w**2 / w2) would be 0 / 0
    # (checked: this fails when the guard needs both n == 0 and w <= 0).
    counts = SlidingCounts(bucket_s=10, horizon_s=60)
    counts.add(5.0, hit=True, weight=0.0)
    assert counts.stats(now=5.0, window_s=60, min_samples=1) == WindowStats(
        0, 0.0, 0.0, None, None, None)


def test_format_window() -> None:
    assert [format_window(s) for s in (300, 3600, 86400, 45, 90)] == [
        "5m", "1h", "1d", "45s", "90s"]


def test_average_run_length_closed_forms() -> None:
    # Threshold one step away: the first bad outcome alarms, ARL = 1/p.
    assert average_run_length(0.2, up=1, down=1, h=1) == pytest.approx(5.0)
    # h = 2 with unit steps: L0 = (1 + p) / p^2.
    p = 0.3
    assert average_run_length(p, up=1, down=1, h=2) == pytest.approx((1 + p) / p**2)


def test_average_run_length_matches_simulation() -> None:
    design = design_cusum(0.2, 0.2, 100)
    assert design is not None
    rng = random.Random(1)
    total = 0
    runs = 3000
    for _ in range(runs):
        cusum = BernoulliCusum(design)
        n = 0
        while not cusum.alarm:
            cusum.update(rng.random() < design.p0)
            n += 1
        total += n
    # The exact ARL0 of the chain; the simulated mean is within ~3 standard errors.
    assert total / runs == pytest.approx(design.arl0, rel=0.06)


def test_design_meets_target_with_the_smallest_threshold() -> None:
    design = design_cusum(0.05, 0.10, 100_000)
    assert design is not None
    assert design.arl0 >= 100_000
    assert average_run_length(design.p0, design.up, design.down, design.h - 1) < 100_000
    # After the shift it alarms in a few hundred observations, not tens of thousands.
    assert average_run_length(design.p1, design.up, design.down, design.h) < 300
    # The LLR steps are approximated by integers within a few percent.
    exact = math.log(design.p1 / design.p0) / math.log((1 - design.p0) / (1 - design.p1))
    assert design.up / design.down == pytest.approx(exact, rel=0.06)
    # Wald's bound: the threshold never exceeds log(ARL0).
    assert design.threshold <= math.log(100_000) + design.unit


def test_design_needs_room_for_the_shift() -> None:
    assert design_cusum(0.95, 0.10, 1e5) is None
    assert design_cusum(0.0, 0.10, 1e5) is not None  # a clean baseline is clamped, not 0


def _settings(**kw: object) -> DriftSettings:
    base: dict[str, object] = {"warmup_samples": 200, "min_detect_samples": 20,
                               "arl0": 1e5, "windows_s": [60], "bucket_s": 1}
    base.update(kw)
    return DriftSettings.model_validate(base)


def test_detector_learns_baseline_then_fires_and_resolves_with_hysteresis() -> None:
    rng = random.Random(3)
    det = Detector("pass_rate_drop", "r", "e", _settings(), 0.10)
    t = 0.0
    for _ in range(200):
        det.observe(rng.random() < 0.05, t)
        t += 1
    assert det.baseline_bad is not None
    assert det.baseline_bad == pytest.approx(0.05, abs=0.04)
    assert det.design is not None
    for _ in range(3000):  # in control: no alarm (ARL0 1e5)
        det.observe(rng.random() < 0.05, t)
        t += 1
    assert not det.firing
    assert det.pending == []
    change = t
    while not det.firing:  # failures jump to 30%
        det.observe(rng.random() < 0.30, t)
        t += 1
    assert det.pending[0].state == "firing"
    assert 0 < det.pending[0].at - change < 300
    # One good outcome does not resolve it (hysteresis) ...
    det.observe(False, t)
    assert det.firing
    # ... a recovery does, and the statistic stays capped so that happens in bounded time.
    recovered = t
    while det.firing:
        det.observe(rng.random() < 0.05, t)
        t += 1
    assert det.pending[-1].state == "resolved"
    assert t - recovered < 1000


def test_detector_respects_min_samples_and_configured_baseline() -> None:
    det = Detector("pass_rate_drop", "r", "e", _settings(min_detect_samples=100), 0.10,
                   baseline_bad=0.05)
    assert det.design is not None  # armed without warm-up
    for i in range(99):
        det.observe(True, float(i))  # every evaluation fails
    assert not det.firing  # but fewer than min_detect_samples seen
    det.observe(True, 99.0)
    assert det.firing


def test_detector_resolves_when_stale() -> None:
    det = Detector("pass_rate_drop", "r", "e", _settings(stale_after_s=60), 0.10,
                   baseline_bad=0.05)
    for i in range(100):
        det.observe(True, float(i))
    assert det.firing
    det.check_stale(120.0)
    assert det.firing
    det.check_stale(200.0)
    assert not det.firing
    assert det.pending[-1].stale


def test_detector_fires_at_the_threshold_and_resolves_below_its_share() -> None:
    det = Detector("pass_rate_drop", "r", "e",
                   _settings(min_detect_samples=1, resolve_ratio=0.5, arl0=1e5), 0.10,
                   baseline_bad=0.05)
    design = det.design
    assert design is not None
    # The walk below relies on this design: +10 per failure, -1 per pass, alarm at 76.
    assert (design.up, design.down, design.h) == (10, 1, 76)
    t = 0.0
    for bad in [True] * 7 + [False] * 4:  # the statistic peaks at 70, ends at 66
        det.observe(bad, t)
        t += 1
    assert not det.firing
    det.observe(True, t)  # 76: exactly the threshold, which alarms ("S >= h")
    assert det.firing
    assert det.pending[-1].statistic == pytest.approx(design.threshold)
    for _ in range(38):  # down to 38 = resolve_ratio x h: not yet below it
        t += 1
        det.observe(False, t)
    assert det.firing
    det.observe(False, t + 1)  # 37 < 38: resolved
    assert not det.firing
    assert [tr.state for tr in det.pending] == ["firing", "resolved"]


def test_a_baseline_leaving_no_room_for_the_shift_disables_the_detector() -> None:
    # 95% failing already: a 10-point rise is impossible, so there is nothing to detect,
    # and the detector must not fall back to learning a baseline of its own.
    with capture_logs() as logs:
        det = Detector("pass_rate_drop", "r", "e", _settings(warmup_samples=10), 0.10,
                       baseline_bad=0.95)
    assert det.disabled
    # Said, not only shown as a NaN statistic: the stream is no longer watched.
    assert [(e["event"], e["route"], e["evaluator"], e["baseline_bad"]) for e in logs] == [
        ("drift_detector_disabled", "r", "e", 0.95)]
    assert det.design is None
    for i in range(100):
        det.observe(True, float(i))
    assert (det.design, det.statistic, det.firing, det.warm_n) == (None, None, False, 0)
    assert det.pending == []
    assert det.awaiting_design is None


def test_after_a_stale_resolve_min_detect_samples_counts_afresh() -> None:
    det = Detector("pass_rate_drop", "r", "e",
                   _settings(min_detect_samples=20, stale_after_s=60), 0.10, baseline_bad=0.05)
    for i in range(20):
        det.observe(True, float(i))
    assert det.firing
    det.check_stale(19.0 + 59.9)
    assert det.firing
    det.check_stale(19.0 + 60.0)  # quiet for exactly stale_after_s
    assert not det.firing
    assert det.pending[-1].stale
    fired_after = 0
    while not det.firing:
        fired_after += 1
        det.observe(True, 100.0 + fired_after)
    assert fired_after == 20  # every one a failure, but 20 needed again


def test_learned_baseline_without_margin_designs_at_the_estimate() -> None:
    # margin_z 0: no pessimistic margin, the design point is the smoothed estimate itself
    # (not the raw share 9/10, which is above it).
    assert learned_baseline(9, 10, 0.0) == (9.5 / 11, 9.5 / 11)
    estimate, design = learned_baseline(9, 10, 1.0)
    assert design > 0.9 > estimate


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        DriftSettings(baselines={"r/e": 1.0})
    with pytest.raises(ValueError, match="multiple of bucket_s"):
        DriftSettings(windows_s=[305], bucket_s=10)
    # The statistic is never negative: at 0 a firing alert could never resolve.
    with pytest.raises(ValueError, match=r"resolve_ratio\n.*greater than 0"):
        DriftSettings(resolve_ratio=0.0)


@pytest.mark.parametrize(("x", "df", "p"), [
    (3.841459, 1, 0.05), (5.991465, 2, 0.05), (18.307038, 10, 0.05), (0.5, 3, 0.918891),
    (0.001, 1, 0.974773), (40.0, 30, 0.104864),
])
def test_chi2_survival_matches_tables(x: float, df: int, p: float) -> None:
    assert chi2_sf(x, df) == pytest.approx(p, rel=1e-4)
    assert chi2_isf(chi2_sf(x, df), df) == pytest.approx(x, rel=1e-6)
    # df = 2 has the closed form exp(-x/2).
    assert chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-9)


def test_chi2_needs_degrees_of_freedom() -> None:
    # A single label leaves none; the G-test never asks, anything else is a caller's bug.
    with pytest.raises(ValueError, match="df must be positive"):
        chi2_sf(1.0, 0)
    assert chi2_sf(0.0, 3) == 1.0


def test_g_test_flags_a_changed_mix_and_passes_the_same_mix() -> None:
    baseline = Counter({"billing": 600, "shipping": 350, "other": 50})
    same = g_test(Counter({"billing": 61, "shipping": 34, "other": 5}), baseline)
    assert same is not None
    assert same.p_value > 0.5
    moved = g_test(Counter({"billing": 20, "shipping": 75, "other": 5}), baseline)
    assert moved is not None
    assert moved.p_value < 1e-10
    assert moved.df == 2
    assert moved.label in {"billing", "shipping"}
    # A label the baseline never saw is expected rarely, not never (no infinite G).
    new = g_test(Counter({"billing": 10, "refunds": 2}), Counter({"billing": 100}))
    assert new is not None
    assert math.isfinite(new.g)
    assert g_test(Counter(), baseline) is None
    # One label on both sides: the same mix, not "nothing to compare".
    alone = g_test(Counter({"neutral": 40}), Counter({"neutral": 500}))
    assert alone is not None
    assert (alone.g, alone.df, alone.p_value) == (0.0, 0, 1.0)


def test_label_window_is_bounded_in_time_and_labels() -> None:
    window = LabelWindow(bucket_s=1, horizon_s=10)
    for i in range(MAX_LABELS + 10):
        window.add(float(i) * 0.01, f"label{i}")
    counts = window.counts(1.0, 10)
    assert sum(counts.values()) == MAX_LABELS + 10
    assert len(counts) == MAX_LABELS + 1  # the rest share one overflow bucket
    window.add(50.0, "label0")
    window.add(50.0, "never-seen")  # the label set is full: counted as overflow
    assert window.counts(50.0, 10) == Counter({"label0": 1, "(more)": 1})


def test_g_test_names_the_label_that_moved_most_against_its_noise() -> None:
    # "b" went from 10% to 14%; "a" lost the same 40 evaluations, but from 80% that is
    # within its noise. The alert must name "b" (standardised, not raw, departure).
    moved = g_test(Counter({"a": 760, "b": 140, "c": 100}),
                   Counter({"a": 800, "b": 100, "c": 100}))
    assert moved is not None
    assert (moved.label, moved.baseline_share, moved.share) == ("b", 0.1, 0.14)


def test_g_test_result_fields_at_the_edges() -> None:
    # A label the baseline never saw: its baseline share is 0.
    new = g_test(Counter({"billing": 10, "refunds": 30}), Counter({"billing": 100}))
    assert new is not None
    assert (new.label, new.baseline_share, new.share) == ("refunds", 0.0, 0.75)
    # One label on both sides: both shares are all of it.
    alone = g_test(Counter({"neutral": 40}), Counter({"neutral": 500}))
    assert alone is not None
    assert (alone.n, alone.label, alone.baseline_share, alone.share) == (40, "neutral", 1.0, 1.0)
    # A single live evaluation is something to compare (min_samples is the caller's rule).
    one = g_test(Counter({"a": 1}), Counter({"a": 5, "b": 5}))
    assert one is not None
    assert one.n == 1
    assert g_test(Counter({"a": 1}), Counter()) is None


def test_label_window_memory_is_bounded_by_the_horizon() -> None:
    window = LabelWindow(bucket_s=1, horizon_s=10)
    for t in range(1000):
        window.add(float(t), "a")
    assert len(window._buckets) <= 10
    assert window.counts(999.0, 10) == Counter({"a": 10})


def test_mix_detector_resolves_when_quiet_for_exactly_stale_after() -> None:
    det = MixDetector("r", "topic", warmup=10, alpha=1e-3, resolve_p=0.1, min_samples=10,
                      window_s=60)
    window = LabelWindow(bucket_s=1, horizon_s=60, vocabulary=det.vocabulary)
    for i in range(10):
        det.observe("a", float(i))
    for i in range(100):  # whole seconds, so "exactly 60 s later" is exact in floats
        window.add(20.0 + i // 10, "b")
        det.observe("b", 20.0 + i // 10)
    det.check(window, 30.0)
    assert det.firing
    last = det.last_seen
    assert last == 29.0
    det.check_stale(last + 59.0, stale_after_s=60.0)
    assert det.firing
    det.check_stale(last + 60.0, stale_after_s=60.0)
    assert not det.firing
    assert [p[0] for p in det.pending] == ["firing", "resolved"]


def test_learned_baseline_is_designed_on_the_pessimistic_side() -> None:
    estimate, design = learned_baseline(50, 1000, margin_z=1.0)
    assert estimate == pytest.approx(50.5 / 1001)
    # One standard error (~0.7 points at 5% of 1000) above the estimate.
    assert design == pytest.approx(0.05 + math.sqrt(0.05 * 0.95 / 1000), abs=1e-3)
    assert learned_baseline(50, 1000, margin_z=0.0) == (estimate, estimate)
    # A clean warm-up still gives a positive baseline.
    assert learned_baseline(0, 1000, margin_z=1.0)[0] > 0


def test_detector_reports_the_estimate_but_tunes_on_the_margin() -> None:
    det = Detector("pass_rate_drop", "r", "e", _settings(warmup_samples=1000), 0.10)
    for i in range(1000):
        det.observe(i % 20 == 0, float(i))  # exactly 5% failures
    assert det.baseline_bad == pytest.approx(50.5 / 1001)
    assert det.design is not None
    assert det.design.p0 > 0.055


def test_deferred_design_replays_what_it_saw_while_waiting() -> None:
    # An ARL0 no other test uses, so the design is not cached yet.
    settings = _settings(warmup_samples=100, arl0=54_321.0)
    rng = random.Random(4)
    stream = [rng.random() < 0.05 for _ in range(100)] + [rng.random() < 0.5
                                                          for _ in range(200)]
    eager = Detector("pass_rate_drop", "r", "e", settings, 0.10)
    lazy = Detector("pass_rate_drop", "r", "e", settings, 0.10, defer=True)
    for t, bad in enumerate(stream[:100]):
        lazy.observe(bad, float(t))
    # Warm-up done, design not solved on the hot path: the detector waits and keeps count.
    assert lazy.awaiting_design is not None
    assert lazy.design is None
    for t, bad in enumerate(stream[100:], start=100):
        lazy.observe(bad, float(t))
    assert len(lazy.backlog) == 200
    for t, bad in enumerate(stream):
        eager.observe(bad, float(t))
    lazy.arm_pending()
    assert lazy.awaiting_design is None
    assert not lazy.backlog
    assert [(tr.state, tr.at) for tr in lazy.pending] == [
        (tr.state, tr.at) for tr in eager.pending]
    assert lazy.pending
    assert lazy.pending[0].state == "firing"


class _ClearedAfterLookup(dict[tuple[float, float, float], object]):
    """A cache the solver thread empties right after the loop's membership check."""

    def __contains__(self, key: object) -> bool:
        found = super().__contains__(key)
        self.clear()
        return found


def test_design_cache_survives_a_clear_from_another_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    design = design_cusum(0.1, 0.1, 1e5)
    racy = _ClearedAfterLookup({cusum._key(0.1, 0.1, 1e5): design})
    monkeypatch.setattr(cusum, "_CACHE", racy)
    assert design_cusum(0.1, 0.1, 1e5) == design  # not a KeyError


def test_average_run_length_with_no_threshold_is_one_observation() -> None:
    # h <= 0: the statistic starts at the threshold, so the first observation alarms.
    assert average_run_length(0.2, up=1, down=1, h=0) == 1.0
    assert average_run_length(0.2, up=3, down=2, h=-1) == 1.0


@pytest.mark.parametrize(("p0", "shift"), [(0.3, 0.2), (0.2, 0.05), (0.05, 0.2), (0.5, 0.2)])
def test_integer_steps_track_the_llr_ratio_closely(p0: float, shift: float) -> None:
    # The smallest denominator within 2% is taken. None of these ratios is within 2% of a
    # whole number, so the steps must be a real fraction. (0.5, 0.2): the good outcome's
    # step is the larger one, so ``down`` takes the larger count.
    design = design_cusum(p0, shift, 1e4)
    assert design is not None
    llr_bad = math.log(design.p1 / design.p0)
    llr_good = math.log((1 - design.p0) / (1 - design.p1))
    assert design.up / design.down == pytest.approx(llr_bad / llr_good, rel=0.02)
    assert min(design.up, design.down) > 1
    # The unit is the smaller LLR step divided into that side's count.
    assert design.unit * min(design.up, design.down) == pytest.approx(min(llr_bad, llr_good))


def test_integer_steps_use_the_smallest_denominator_within_two_percent() -> None:
    # LLR ratio 9.88: 10/1 is within 2%, so the chain stays small (79/8 would be closer
    # but makes the solve ~8x the work for no useful gain).
    design = design_cusum(0.05, 0.10, 1e4)
    assert design is not None
    assert (design.up, design.down) == (10, 1)


def test_design_keeps_the_configured_shift_to_four_decimals() -> None:
    design = design_cusum(0.1, 0.0525, 1e4)
    assert design is not None
    assert (design.p0, design.p1) == (0.1, 0.1525)


def test_symmetric_llr_steps_are_equal() -> None:
    # p0 = 0.4 -> p1 = 0.6: a bad outcome is as much evidence for as a good one against.
    design = design_cusum(0.4, 0.2, 1e4)
    assert design is not None
    assert (design.up, design.down) == (1, 1)
    assert design.unit == pytest.approx(math.log(1.5))


def test_design_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cusum, "_CACHE", {})
    monkeypatch.setattr(cusum, "_CACHE_SIZE", 3)
    for i in range(10):
        assert design_cusum(0.1 + i / 100, 0.1, 1e3) is not None
        assert len(cusum._CACHE) <= 3
    # The newest design is the one kept.
    assert cusum.is_designed(0.19, 0.1, 1e3)
