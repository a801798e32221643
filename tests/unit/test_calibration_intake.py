"""Canaries through the worker's sampling shortcuts: the flat_json probe, the decoder's
own shortcut (a topic with a mapping) and ``sampling.key: message_key`` all let a canary
through at 1% sampling, while ordinary messages are skipped as before."""

from __future__ import annotations

from typing import Any

import pytest

from evalstream.config import InputTopic
from evalstream.events import RawRecord, dump_json
from evalstream.formats.base import Decoded
from evalstream.formats.flat_json import SAMPLED_OUT, FlatJsonDecoder, make_decoder
from tests.support.probe import sampling_probe
from tests.unit.test_key_sampling import TRACE_IDS, metric, run_worker

RATE = 0.01
GOLD = {"evalstream.canary": "true", "evalstream.gold.unit_scripted": "true"}


def message(i: int, *, canary: bool, nested: bool = False) -> bytes:
    body: dict[str, Any] = {"event_id": f"e{i}", "trace_id": TRACE_IDS[i],
                            "output": "fail" if i % 4 == 0 else "ok",
                            "attributes": {"model": "m", **(GOLD if canary else {})}}
    return dump_json({"payload": body} if nested else body)


HEADER = (("evalstream.canary", b"true"),)


def records(n: int, canaries: set[int], *, nested: bool = False,
            headers: bool = False) -> list[RawRecord]:
    return [RawRecord("traces", 0, i, message(i, canary=i in canaries, nested=nested),
                      TRACE_IDS[i].encode(), HEADER if headers and i in canaries else ())
            for i in range(n)]


CANARIES = set(range(0, 600, 20))  # 30 canaries among 600 messages


@pytest.mark.parametrize("path", ["probe", "decoder_shortcut", "message_key"])
async def test_every_canary_gets_results_at_one_percent_sampling(path: str) -> None:
    sections: dict[str, Any] = {"sampling": {"rate": RATE}}
    nested = path == "decoder_shortcut"
    if nested:  # a mapping: no probe, the decoder's ``keep`` shortcut decides
        sections["inputs"] = [{"topic": "traces", "mapping": {
            f: f"payload.{f}" for f in ("event_id", "trace_id", "output", "attributes")}}]
    if path == "message_key":
        sections["sampling"] = {"rate": RATE, "key": "message_key"}
    worker, _, sink = await run_worker(
        records(600, CANARIES, nested=nested, headers=path == "message_key"), **sections)

    canary_results = [r for r in sink.results if r.canary]
    traffic = [r for r in sink.results if not r.canary]
    assert {r.event_id for r in canary_results} == {f"e{i}" for i in CANARIES}
    assert all(r.gold == "true" and r.sample_rate == 1.0 for r in canary_results)
    assert len(traffic) < 20  # ~1% of 570
    labels = {"route": "main", "evaluator": "unit_scripted", "judge": "builtin"}
    fails = sum(1 for i in CANARIES if i % 4 == 0)
    assert metric(worker, "evalstream_canary_evaluations_total", **labels,
                  outcome="disagreed") == fails
    assert metric(worker, "evalstream_canary_evaluations_total", **labels,
                  outcome="agreed") == len(CANARIES) - fails
    assert metric(worker, "evalstream_evaluations_total", route="main",
                  evaluator="unit_scripted", outcome="passed") + metric(
        worker, "evalstream_evaluations_total", route="main", evaluator="unit_scripted",
        outcome="failed") == len(traffic)
    skipped = metric(worker, "evalstream_events_skipped_total", reason="sampling")
    assert skipped + len(sink.results) == 600


def test_the_probe_hands_marked_messages_to_the_decoder() -> None:
    decoder = make_decoder(InputTopic(topic="traces"))
    assert isinstance(decoder, FlatJsonDecoder)
    probe = sampling_probe(decoder, "trace_id")
    assert probe is not None
    assert probe(message(1, canary=False)) == TRACE_IDS[1]
    assert probe(message(1, canary=True)) is None
    # Even an escaped key is seen: the probe reads the decoded attribute names.
    escaped = message(1, canary=True).replace(b'"evalstream.canary"',
                                              b'"evalstream\\u002ecanary"')
    assert b"evalstream.canary" not in escaped
    assert probe(escaped) is None


def test_the_decoder_shortcut_builds_marked_events() -> None:
    decoder = make_decoder(InputTopic(topic="traces"))

    def never(_: str) -> bool:
        return False

    plain = decoder.decode(RawRecord("traces", 0, 1, message(1, canary=False)), keep=never)
    assert plain is SAMPLED_OUT
    marked = decoder.decode(RawRecord("traces", 0, 2, message(2, canary=True)), keep=never)
    assert isinstance(marked, Decoded)
    assert [e.attributes["evalstream.canary"] for e in marked.events] == ["true"]


async def test_under_message_key_a_keyed_canary_needs_the_header() -> None:
    """The key decides before the message is read: a keyed canary without the header is
    skipped like traffic when its key hashes out; a keyless one is decoded anyway."""
    plain = records(600, CANARIES)  # keyed, no header
    keyless = [RawRecord("traces", 1, n, r.value) for n, r in enumerate(plain)
               if r.offset in CANARIES]
    _, _, sink = await run_worker(plain + keyless,
                                  sampling={"rate": RATE, "key": "message_key"})
    got = {r.event_id for r in sink.results if r.canary}
    assert got == {f"e{i}" for i in CANARIES}  # all, thanks to the keyless copies
    keyed_canaries = [r for r in sink.results if r.canary]
    assert len(keyed_canaries) - len(CANARIES) <= 3  # the keyed copies (nearly) all hashed out


def test_otlp_spans_carry_a_canary_marker_and_gold_answers() -> None:
    """OTLP events keep only known attributes, plus a canary's marker and gold answers."""
    from evalstream.events import load_json
    from evalstream.formats import decoder_for
    from tests.fixtures import otlp

    doc = load_json(otlp.raw("semconv_json_strings"))
    span = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]

    def decoded(extra: dict[str, str]) -> dict[str, str]:
        span["attributes"] = [a for a in span["attributes"]
                              if not a["key"].startswith("evalstream.")]
        span["attributes"] += [{"key": k, "value": {"stringValue": v}}
                               for k, v in extra.items()]
        decoder = decoder_for(InputTopic(topic="spans", format="otlp_json"))
        (event,) = decoder(RawRecord("spans", 0, 1, dump_json(doc))).events
        return event.attributes

    gold = {"evalstream.canary": "true", "evalstream.gold.refusal": "false",
            "evalstream.gold.topic": "billing"}
    attributes = decoded({**gold, "evalstream.other": "x"})
    assert {k: v for k, v in attributes.items() if k.startswith("evalstream.")} == gold
    assert attributes["model"] == "gpt-4o-mini"  # the usual ones are still there
    plain = decoded({"evalstream.gold.refusal": "false"})  # no marker: not carried
    assert not any(k.startswith("evalstream.") for k in plain)
