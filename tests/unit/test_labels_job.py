"""``evalstream join-labels`` on in-memory Kafka: what it commits (only what no longer
waits), what a rewind reads again, dead letters, the stop, and config errors (exit 2)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
import structlog
from prometheus_client import CollectorRegistry

from evalstream.app.labels_job import INVALID_LABEL, LabelJoiner
from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import load_settings
from evalstream.events import SCHEMA_VERSION, EvalResult, RawRecord, dump_json, load_json
from evalstream.sinks.memory import MemorySink
from evalstream.sources.memory import MemorySource
from tests.unit.test_cli import bootstrap, listener, nobody_connected

__all__ = ["listener"]  # the fixture, used by name

RES, LAB = "evalstream.results", "evalstream.labels"


def result(rid: str, *, route: str = "default", passed: bool = True,
           canary: bool = False) -> bytes:
    return dump_json(EvalResult(result_id=rid, event_id=rid, trace_id=rid, route=route,
                                evaluator="refusal", passed=passed, score=0.9 if passed else 0.1,
                                reason="why", canary=canary).model_dump(mode="json"))


def label(rid: str, gold: str = "true") -> bytes:
    return dump_json({"result_id": rid, "gold": gold})


class Job:
    def __init__(self, results: list[bytes], labels: list[bytes]) -> None:
        records = [RawRecord(RES, 0, i, v) for i, v in enumerate(results)]
        records += [RawRecord(LAB, 0, i, v) for i, v in enumerate(labels)]
        self.source = MemorySource(records)
        self.sink = MemorySink()
        self.registry = CollectorRegistry()
        settings = load_settings(None, server={"host": "127.0.0.1", "port": 0},
                                 labels={"retention_s": 60})
        self.joiner = LabelJoiner(settings, registry=self.registry, source=self.source,
                                  sink=self.sink)

    async def read(self, now: float = 0.0) -> None:
        while batch := await self.source.poll(0.0, 100):
            for tp, records in batch.items():
                for record in records:
                    await self.joiner.take(tp, record, now)

    def v(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def agreed(self) -> float:
        return self.v("evalstream_labels_evaluations_total", route="default",
                      evaluator="refusal", judge="builtin", outcome="agreed")


async def test_commits_stop_at_the_oldest_entry_still_waiting() -> None:
    job = Job([result("r0"), result("r1"), result("x", route="gone"), b"not json"],
              [label("r1"), label("later"), b"{", label("r1")])
    await job.source.start(job.joiner)
    await job.read()
    await job.joiner.committer.commit()
    # r0 waits for a label; "later" waits for its result: nothing past them is committed.
    assert job.source.committed == {(RES, 0): 0, (LAB, 0): 1}
    assert job.agreed() == 1
    assert job.v("evalstream_labels_ignored_total", kind="result",
                 reason="unknown_evaluator") == 1
    assert job.v("evalstream_labels_ignored_total", kind="result", reason="undecodable") == 1
    assert job.v("evalstream_labels_ignored_total", kind="label", reason="undecodable") == 1
    assert job.v("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 1
    assert [(d.record.value, d.reason) for d in job.sink.dead_letters] == [
        (b"{", INVALID_LABEL)]
    # The error says what a label must be, limits included (a long gold is refused too).
    assert "at most 256 characters" in job.sink.dead_letters[0].error
    assert job.v("evalstream_dead_letters_total", reason=INVALID_LABEL) == 1
    # Once they expire, nothing waits: committed to the ends.
    job.joiner.store.expire(61.0)
    await job.joiner.committer.commit()
    assert job.source.committed == {(RES, 0): 4, (LAB, 0): 4}
    assert job.v("evalstream_labels_unmatched_total", kind="result", reason="expired") == 1
    assert job.v("evalstream_labels_unmatched_total", kind="label", reason="expired") == 1


async def test_a_rewind_reads_what_waited_without_counting_a_match_again() -> None:
    # r1 matched (label after result); r0 waits, so the results commit stays at 0 and r1 is
    # read again after the rewind; its label was committed, so it is not: no second count.
    job = Job([result("r0"), result("r1")], [label("r1")])
    await job.source.start(job.joiner)
    await job.read()
    tps = [(RES, 0), (LAB, 0)]
    await job.source.revoke(tps)
    assert job.source.committed == {(RES, 0): 0, (LAB, 0): 1}
    assert job.v("evalstream_labels_unmatched_total", kind="result", reason="revoked") == 1
    assert job.joiner.store.waiting() == {"result": 0, "label": 0}
    await job.joiner.on_assigned(tps)
    await job.read()
    assert job.agreed() == 1
    assert job.joiner.store.waiting() == {"result": 2, "label": 0}


async def test_a_rewind_counts_again_a_pair_that_lay_behind_waiting_entries() -> None:
    # The documented at-least-once case: both halves of a match behind an entry still
    # waiting on their partitions are read again, and meet again.
    job = Job([result("r0"), result("r1")], [label("early"), label("r1")])
    await job.source.start(job.joiner)
    await job.read()
    tps = [(RES, 0), (LAB, 0)]
    await job.source.revoke(tps)
    await job.joiner.on_assigned(tps)
    await job.read()
    assert job.agreed() == 2


async def test_run_serves_and_stops_cleanly_with_a_final_commit() -> None:
    job = Job([result("r0")], [label("r0"), b"bad"])
    ready = asyncio.Event()
    task = asyncio.create_task(job.joiner.run(ready))
    await asyncio.wait_for(ready.wait(), 5)
    for _ in range(100):
        if job.agreed() == 1:
            break
        await asyncio.sleep(0.02)
    assert job.agreed() == 1
    assert job.v("evalstream_ready") == 1
    job.joiner.request_stop()
    assert await asyncio.wait_for(task, 10) == 0
    assert job.source.committed == {(RES, 0): 1, (LAB, 0): 2}
    assert job.v("evalstream_ready") == 0


BAD = {
    "labels topic is the results topic": ("labels: {{topic: evalstream.results}}\n",
                                          "labels.topic"),
    "the workers' group": ("labels: {{group_id: evalstream}}\n", "labels.group_id"),
    "negative retention": ("labels: {{retention_s: -1}}\n", "labels.retention_s"),
    "unknown key": ("labels: {{topics: x}}\n", "labels.topics"),
    # As the workers say it: the joiner named no field, and ran on params they refuse.
    "unknown evaluator": ("routes: [{{name: a, evaluators: [{{evaluator: nosuch}}]}}]\n",
                          "routes[0] (a) evaluators[0].evaluator: unknown evaluator"),
    "invalid params": ("routes: [{{name: a, evaluators: [{{evaluator: topic}}]}}]\n",
                       "routes[0] (a) evaluators[0] (topic): params.topics"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_config_exits_2_naming_the_field(case: str, tmp_path: Path,
                                             listener: socket.socket,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    text, needle = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(f"kafka:\n  bootstrap_servers: {bootstrap(listener)}\n"
                    + text.format(), encoding="utf-8")
    assert main(["join-labels", "--config", str(path)]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "configuration error" in err
    assert needle in err, err
    assert nobody_connected(listener)


async def test_a_topic_never_assigned_is_warned_about() -> None:
    job = Job([result("r0")], [])  # nothing on the labels topic: as if it did not exist
    await job.source.start(job.joiner)
    with structlog.testing.capture_logs() as logs:
        await job.joiner.watch_topics(0.0)
    assert [(e["event"], e["topics"]) for e in logs] == [("topics_not_assigned", [LAB])]
    both = Job([result("r0")], [label("r0")])
    await both.source.start(both.joiner)
    with structlog.testing.capture_logs() as logs:
        await both.joiner.watch_topics(0.0)
    assert logs == []


async def test_a_rebalance_mid_batch_drops_the_rest_of_the_batch() -> None:
    """An eager rebalance while a dead letter is sent (the one await of a message) rewinds
    the partitions to their commit: the rest of the batch taken before it is fetched
    again. Was: taken anyway into the fresh partition state, so a redelivered message
    released the stale one's entry, and the commit passed a label still waiting."""
    job = Job([], [b"{", label("z"), label("w")])
    publish = job.sink.publish_dead_letter
    rebalanced = False

    async def rebalance_on_first(record: object, reason: str, error: str) -> None:
        nonlocal rebalanced
        await publish(record, reason, error)  # type: ignore[arg-type]
        if not rebalanced:
            rebalanced = True
            tps = sorted(job.source.assignment())
            await job.source.revoke(tps)
            await job.joiner.on_assigned(tps)

    job.sink.publish_dead_letter = rebalance_on_first  # type: ignore[method-assign]
    await job.source.start(job.joiner)
    consume = asyncio.create_task(job.joiner.consume())
    try:
        for _ in range(200):
            if len(job.sink.dead_letters) == 2 and job.joiner.store.waiting()["label"] == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        await job.joiner.committer.commit()
        assert not consume.done()  # it did not crash
    finally:
        consume.cancel()
        await asyncio.gather(consume, return_exceptions=True)
    # "z" (offset 1) still waits for its result: nothing past it is committed.
    assert job.source.committed[(LAB, 0)] == 1
    assert job.v("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 0


async def test_the_joiner_starts_without_the_otel_results_topic(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # It writes only dead letters: the OTel copy of results is the workers' output, and
    # checking it stopped the joiner where that topic is not created (yet, or for it).
    from evalstream.sinks import kafka as sink_module
    from tests.unit.test_kafka_sink_start import _Producer

    monkeypatch.setattr(sink_module, "AIOKafkaProducer", _Producer)
    monkeypatch.setattr(_Producer, "existing", frozenset({RES, "evalstream.dlq"}))
    settings = load_settings(None, topics={"otel_results": "otel", "otel_encoding": "otlp_json"})
    joiner = LabelJoiner(settings, registry=CollectorRegistry(), source=MemorySource([]))
    await joiner.sink.start()
    await joiner.sink.stop()


async def test_canary_results_are_not_held_for_human_labels() -> None:
    # A canary is checked against its own gold by the worker; held, it waited retention_s
    # for a label that never comes (holding the commit back), or a label on it was
    # counted among the human labels.
    job = Job([result("c", canary=True), result("r")], [label("c"), label("r")])
    await job.source.start(job.joiner)
    await job.read()
    await job.joiner.committer.commit()
    assert job.v("evalstream_labels_ignored_total", kind="result", reason="canary") == 1
    assert job.agreed() == 1  # r's alone
    # The canary's result is released at once; its label waits as any unmatched one.
    assert job.source.committed == {(RES, 0): 2, (LAB, 0): 0}


def _newer(rid: str, version: str) -> bytes:
    """``rid``'s result as a worker on schema ``version`` would write it: a field this
    release does not know, at top level and in ``judge``."""
    body = load_json(result(rid))
    body.update(schema_version=version, added_later={"x": 1})
    body["judge"] = {"backend": "builtin", "added_later_too": True}
    return dump_json(body)


async def test_results_of_a_later_minor_schema_version_are_still_joined() -> None:
    # A minor version only adds fields, and workers are upgraded before (or without) the
    # joiner: reading with the worker's own strict model (extra fields forbidden) counted
    # every newer result as undecodable, so no human label was joined until the joiner
    # was upgraded too.
    major = SCHEMA_VERSION.split(".")[0]
    job = Job([_newer("r", f"{major}.999"), _newer("s", f"{int(major) + 1}.0")],
              [label("r"), label("s")])
    await job.source.start(job.joiner)
    await job.read()
    assert job.agreed() == 1
    # A later major version may have renamed or retyped a field: not read as this one.
    assert job.v("evalstream_labels_ignored_total", kind="result", reason="undecodable") == 1
