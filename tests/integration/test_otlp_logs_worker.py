"""The worker on an ``otlp_logs_proto`` input (the Collector Kafka exporter's ``logs_topic``):
GenAI event records captured from real instrumentations (openai-v2 EVENT_ONLY, OpenLLMetry
``use_attributes=False``) become results, application logs are counted skips, and messages
that are not log batches are dead-lettered. Real broker, builtin judge."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import InputTopic
from evalstream.events import RawRecord, dump_json
from evalstream.formats import decoder_for
from tests.fixtures import otlp
from tests.integration.workerkit import Topics, committed, results, running, settings_for, wait_for
from tests.support.broker import Broker
from tests.support.kafka import produce, read_all
from tests.unit.test_formats_otlp_captured import _logs_to_proto

pytestmark = pytest.mark.integration

PARTITIONS = 2


async def test_otlp_logs_batches_give_results_skips_and_dead_letters(broker: Broker) -> None:
    topics = Topics.fresh("otlp-logs")
    await topics.create(broker.bootstrap, partitions=PARTITIONS)
    settings = settings_for(broker.bootstrap, topics,
                            inputs=[{"topic": topics.inputs, "format": "otlp_logs_proto"}])

    app_logs = {"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [
        {"severityNumber": 9, "body": {"stringValue": f"GET /orders/{i} 200"}}
        for i in range(4)]}]}]}
    values = [_logs_to_proto(otlp.load("real_openai_v2_event_only_logs")),
              _logs_to_proto(app_logs),
              _logs_to_proto(otlp.load("real_openllmetry_events_logs"))]
    # What the decoder makes of them, the worker must publish (one result per event).
    decoder = decoder_for(InputTopic(topic=topics.inputs, format="otlp_logs_proto"))
    expected = {e.event_id for v in values
                for e in decoder(RawRecord(topics.inputs, 0, 0, v)).events if e.output}
    assert len(expected) == 13  # 7 + 6 calls with an answer
    garbage = [b"\xff\xff\xff\xff garbage", dump_json({"input": "hi", "output": "flat json"}),
               otlp.to_proto(otlp.load("real_openai_v2_span_only"))]  # traces on a logs input
    values = values[:2] + garbage + values[2:]
    ends = await produce(broker.bootstrap, topics.inputs, values,
                         keys=[str(i).encode() for i in range(len(values))])

    registry = CollectorRegistry()
    worker = Worker(settings, registry=registry)
    async with running(worker):
        async def reached() -> bool:
            got = await committed(broker.bootstrap, topics.group, topics.inputs, PARTITIONS)
            return all(got.get(p, 0) >= end for p, end in ends.items())

        await wait_for(reached, timeout=60, what="committed offsets to reach the end")

    published = await results(broker.bootstrap, topics.results, expect=len(expected))
    ok = {str(r["event_id"]) for r in published if r["status"] == "ok"}
    assert ok == expected
    for result in published:
        assert result["app"] == "walk-bot"
        assert result["event_id"] == f"{result['trace_id']}-{result['span_id']}"

    def skipped(reason: str) -> float | None:
        return registry.get_sample_value("evalstream_events_skipped_total", {"reason": reason})

    assert skipped("not_genai") == 4  # the application log lines
    assert skipped("no_span_id") == 1  # OpenLLMetry's streamed choice outside its span
    assert skipped("error_span") == 1  # openai-v2's failed call (error.type)

    dead = await read_all(broker.bootstrap, topics.dead_letter, expect=len(garbage), timeout=30)
    reasons = {record.value: dict(record.headers)["reason"] for record in dead}  # type: ignore[attr-defined]
    assert reasons == {garbage[0]: b"invalid_protobuf", garbage[1]: b"invalid_protobuf",
                       garbage[2]: b"invalid_protobuf"}
