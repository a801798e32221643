"""Deterministic hash sampling: reproducible, nested across rates, close to the rate."""

from __future__ import annotations

import random

from evalstream.config import SamplingSettings
from evalstream.events import TraceEvent
from evalstream.sampling import Sampler


def events(n: int) -> list[TraceEvent]:
    return [TraceEvent(event_id=f"e{i}", trace_id=f"t{i}") for i in range(n)]


def test_same_key_same_fraction_across_instances() -> None:
    a, b = Sampler(SamplingSettings()), Sampler(SamplingSettings())
    for event in events(50):
        assert a.fraction(event) == b.fraction(event)
        assert 0.0 <= a.fraction(event) < 1.0


def test_spans_of_one_trace_are_sampled_together() -> None:
    sampler = Sampler(SamplingSettings(key="trace_id"))
    spans = [TraceEvent(event_id=f"span{i}", trace_id="trace-42") for i in range(5)]
    assert len({sampler.fraction(s) for s in spans}) == 1


def test_rates_nest() -> None:
    sampler = Sampler(SamplingSettings())
    for event in events(2000):
        f = sampler.fraction(event)
        if sampler.sampled(f, 0.01):
            assert sampler.sampled(f, 0.1)
        if sampler.sampled(f, 0.1):
            assert sampler.sampled(f, 0.5)


def test_share_sampled_is_close_to_the_rate() -> None:
    sampler = Sampler(SamplingSettings())
    fractions = [sampler.fraction(e) for e in events(20_000)]
    for rate in (0.01, 0.1, 0.3, 0.9):
        share = sum(sampler.sampled(f, rate) for f in fractions) / len(fractions)
        assert abs(share - rate) < 0.02 + rate * 0.1, (rate, share)
    assert not any(sampler.sampled(f, 0.0) for f in fractions)
    assert all(sampler.sampled(f, 1.0) for f in fractions)


def test_salt_draws_a_different_sample() -> None:
    plain, salted = Sampler(SamplingSettings()), Sampler(SamplingSettings(salt="2026"))
    sample = events(1000)
    keep_plain = {e.event_id for e in sample if plain.sampled(plain.fraction(e), 0.2)}
    keep_salted = {e.event_id for e in sample if salted.sampled(salted.fraction(e), 0.2)}
    assert keep_plain != keep_salted


def test_missing_key_falls_back_to_event_id() -> None:
    sampler = Sampler(SamplingSettings(key="session_id"))
    a = TraceEvent(event_id="x1", trace_id="t")
    b = TraceEvent(event_id="x2", trace_id="t")
    assert sampler.fraction(a) == sampler.fraction_of("x1")
    assert sampler.fraction(a) != sampler.fraction(b)
    with_session = TraceEvent(event_id="x1", session_id="s9")
    assert sampler.fraction(with_session) == sampler.fraction_of("s9")


def test_route_rate_multiplies_with_the_global_rate() -> None:
    sampler = Sampler(SamplingSettings(rate=0.5))
    assert sampler.rate_for(0.2) == 0.1
    assert sampler.rate_for(1.0) == 0.5


def _uuid_hex_ids(n: int) -> list[str]:
    """Trace ids as W3C / OTLP write them: always 32 hex digits (one fixed length)."""
    rng = random.Random(11)
    return [f"{rng.getrandbits(128):032x}" for _ in range(n)]


def test_salts_draw_independent_samples_of_fixed_length_trace_ids() -> None:
    # CRC-32 is affine: for keys of one length, a salted CRC is the plain CRC XOR a
    # constant, so two salts' samples at rate 1/2 or 1/4 were identical or disjoint (on
    # 32-hex trace ids, "2026" vs no salt shared 0 of ~2,500 expected at 25%), never the
    # independent draw ``salt`` is there for. Independent samples overlap by rate^2.
    ids = _uuid_hex_ids(40_000)
    rate = 0.25
    samplers = [Sampler(SamplingSettings(salt=s)) for s in ("", "2026", "team-b", "2027")]
    kept = [{i for i in ids if s.sampled(s.fraction_of(i), rate)} for s in samplers]
    expected = rate * rate * len(ids)  # 2,500; binomial sd ~ 48
    for a in range(len(kept)):
        assert abs(len(kept[a]) - rate * len(ids)) < 400
        for b in range(a + 1, len(kept)):
            assert abs(len(kept[a] & kept[b]) - expected) < 250, (a, b)


def test_salted_sampling_stays_nested_and_uniform() -> None:
    sampler = Sampler(SamplingSettings(salt="2026"))
    fractions = [sampler.fraction_of(i) for i in _uuid_hex_ids(50_000)]
    assert all(0.0 <= f < 1.0 for f in fractions)
    # Chi-square over 50 equal buckets, 49 degrees of freedom: the 0.999 quantile is 85.4.
    counts = [0] * 50
    for f in fractions:
        counts[int(f * 50)] += 1
    expected = len(fractions) / 50
    assert sum((c - expected) ** 2 / expected for c in counts) < 85.4
    # Nested: the fraction is fixed per key, so a lower rate keeps a subset.
    low = {i for i, f in enumerate(fractions) if f < 0.01}
    high = {i for i, f in enumerate(fractions) if f < 0.1}
    assert low <= high
    assert 350 < len(low) < 650
