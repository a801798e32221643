"""``topics.otel_results``: the worker writes every result a second time as an OTLP log
record (``gen_ai.evaluation.result``) that an OpenTelemetry Collector's Kafka receiver can
read; one record per result, parented to the evaluated span, keyed and partitioned like the
result, written before the input offsets are committed. Real broker, builtin judge."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import PolicyViolationError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import KafkaSettings, TopicSettings, load_settings
from evalstream.errors import OutputRejectedError
from evalstream.events import EvalResult, dump_json, load_json
from evalstream.sinks.kafka import KafkaSink
from tests.integration.workerkit import (
    Topics,
    config_dict,
    event_json,
    running,
    wait_committed_total,
)
from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, read_all, unique

pytestmark = pytest.mark.integration

EVENTS = 8
PARTITIONS = 2


def _event(i: int) -> bytes:
    """Event ``i`` with OTel ids and a response id; event 0 with an app's own trace id."""
    if i == 0:
        return event_json(0)
    return dump_json({"event_id": f"e{i}", "trace_id": f"{i:032x}", "span_id": f"{i:016x}",
                      "input": f"How do I reset my password? ({i})",
                      "output": ("I'm sorry, but I can't help with that request." if i % 2
                                 else f"Sure. Step {i}: open Settings, choose Reset."),
                      "attributes": {"response_id": f"chatcmpl-{i}"}})


def _attributes(request: ExportLogsServiceRequest) -> tuple[Any, dict[str, Any]]:
    (resource_logs,) = request.resource_logs
    (scope_logs,) = resource_logs.scope_logs
    (record,) = scope_logs.log_records
    values = {kv.key: getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
              for kv in record.attributes}
    return record, values


async def test_each_result_is_also_an_otel_event_on_its_topic(broker: Broker) -> None:
    topics = Topics.fresh("otel")
    otel = unique("otel-events")
    await create_topics(broker.bootstrap, [topics.inputs], partitions=PARTITIONS)
    await create_topics(broker.bootstrap, [topics.results, otel], partitions=PARTITIONS)
    await create_topics(broker.bootstrap, [topics.dead_letter, topics.alerts])
    data = config_dict(broker.bootstrap, topics,
                       results={"attributes": ["response_id"]},
                       routes=[{"name": "support", "evaluators": [{"evaluator": "refusal"}]}])
    data["topics"]["otel_results"] = otel
    settings = load_settings(None, **data)
    await produce(broker.bootstrap, topics.inputs, [_event(i) for i in range(EVENTS)],
                  keys=[str(i).encode() for i in range(EVENTS)])

    async with running(Worker(settings, registry=CollectorRegistry())):
        # Committed means published: by then both copies of every result are on the broker.
        await wait_committed_total(broker.bootstrap, topics, PARTITIONS, EVENTS, timeout=60)

    published = await read_all(broker.bootstrap, topics.results, expect=EVENTS, idle=1.0)
    events = await read_all(broker.bootstrap, otel, expect=EVENTS, idle=1.0)
    assert len(published) == len(events) == EVENTS
    by_id: dict[str, tuple[dict[str, Any], Any]] = {}
    for message in published:
        result = load_json(message.value)  # type: ignore[attr-defined]
        by_id[result["result_id"]] = result, message
    seen = set()
    for message in events:
        request = ExportLogsServiceRequest.FromString(message.value)  # type: ignore[attr-defined]
        record, attributes = _attributes(request)
        assert record.event_name == "gen_ai.evaluation.result"
        result, published_as = by_id[attributes["evalstream.result_id"]]
        seen.add(result["result_id"])
        # The result's key, so the same partition (both topics have as many).
        assert message.key == published_as.key == result["trace_id"].encode()  # type: ignore[attr-defined]
        assert message.partition == published_as.partition  # type: ignore[attr-defined]
        if result["event_id"] == "e0":  # "trace-0" is no OTel id: nothing to parent to
            assert (record.trace_id, record.span_id) == (b"", b"")
            assert "gen_ai.response.id" not in attributes
        else:
            assert record.trace_id.hex() == result["trace_id"]
            assert record.span_id.hex() == result["span_id"]
            assert attributes["gen_ai.response.id"] == result["attributes"]["response_id"]
        assert attributes["gen_ai.evaluation.name"] == result["evaluator"] == "refusal"
        assert attributes["gen_ai.evaluation.score.value"] == result["score"]
        assert attributes["evalstream.passed"] == result["passed"]
        assert attributes["evalstream.route"] == "support"
        resource = request.resource_logs[0].resource
        assert [(a.key, a.value.string_value) for a in resource.attributes] == [
            ("service.name", settings.kafka.client_id)]
    assert seen == set(by_id)  # one event per result, none twice
    # Both outcomes were exercised (odd events are refusals).
    assert {r["passed"] for r, _ in by_id.values()} == {True, False}


async def test_a_result_too_large_to_publish_writes_no_otel_copy(broker: Broker) -> None:
    # The producer refuses the result (larger than max_request_size). A copy sent beside it
    # (no details: small) went out anyway, and the worker then publishes an error result in
    # its place, with its own copy: two records under one result_id on the OTel topic, one
    # of them a score the results topic never carried. The copy waits for the result's ack.
    results, dlq, otel = unique("res"), unique("dlq"), unique("otel-events")
    await create_topics(broker.bootstrap, [results, dlq, otel])
    sink = KafkaSink(KafkaSettings(bootstrap_servers=broker.bootstrap, max_request_size=4096),
                     TopicSettings(results=results, dead_letter=dlq, otel_results=otel))
    big = EvalResult(result_id="r" * 32, event_id="e", trace_id="t", route="r",
                     evaluator="refusal", evaluator_version="1", score=1.0,
                     details={"event_ids": ["x" * 100] * 50})
    await sink.start()
    try:
        with pytest.raises(OutputRejectedError, match=f"{results} refused"):
            await sink.publish_result(big)
        await sink.publish_result(big.model_copy(update={"details": {}}))  # both written
    finally:
        await sink.stop()
    # Read until idle, not ``expect=2``: that waited read_all's whole timeout (30 s) each
    # passing run; both publishes were acknowledged, so everything is there to read.
    assert len(await read_all(broker.bootstrap, otel)) == 1


class _PolicySink(KafkaSink):
    """The Kafka sink on a producer whose results topic refuses, at the ack as a broker's
    topic policy would, the ok result of one event (Tansu enforces no topic policy, nor a
    topic's ``max.message.bytes``); everything else is written to the real broker."""

    def __init__(self, settings: Any, refused: bytes) -> None:
        super().__init__(settings.kafka, settings.topics)
        self._refused = refused
        self._results_topic = settings.topics.results

    def client(self) -> AIOKafkaProducer:
        producer = super().client()
        send = producer.send

        async def policy(topic: str, value: bytes, key: bytes | None = None,
                         **kwargs: Any) -> asyncio.Future[Any]:
            if topic == self._results_topic and self._refused in value \
                    and b'"status":"ok"' in value:
                refused: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                refused.set_exception(PolicyViolationError())
                return refused
            written: asyncio.Future[Any] = await send(topic, value, key=key, **kwargs)
            return written

        producer.send = policy
        return producer


async def test_a_result_refused_by_a_topic_policy_has_only_its_stand_in_copied(
        broker: Broker) -> None:
    # Sent beside the result, the refused result's copy went out anyway, and the error
    # result standing in for it was copied too: two OTel events under one result_id, one
    # with a score the results topic never carried.
    topics = Topics.fresh("otelpolicy")
    otel = unique("otel-events")
    await create_topics(broker.bootstrap, [topics.inputs, topics.results, otel,
                                           topics.dead_letter, topics.alerts])
    data = config_dict(broker.bootstrap, topics,
                       routes=[{"name": "support", "evaluators": [{"evaluator": "refusal"}]}])
    data["topics"]["otel_results"] = otel
    settings = load_settings(None, **data)
    events = 4
    await produce(broker.bootstrap, topics.inputs, [_event(i) for i in range(events)])
    sink = _PolicySink(settings, refused=b'"event_id":"e3"')

    async with running(Worker(settings, registry=CollectorRegistry(), sink=sink)):
        await wait_committed_total(broker.bootstrap, topics, 1, events, timeout=60)

    published = [load_json(m.value) for m in  # type: ignore[attr-defined]
                 await read_all(broker.bootstrap, topics.results, expect=events, idle=1.0)]
    copies = [_attributes(ExportLogsServiceRequest.FromString(m.value))[1]  # type: ignore[attr-defined]
              # until idle: committed means acknowledged, and one copy too many is the bug
              for m in await read_all(broker.bootstrap, otel)]
    (stand_in,) = [r for r in published if r["event_id"] == "e3"]
    assert stand_in["status"] == "error"
    assert stand_in["error"].startswith("result rejected:")
    # One copy per published result, the refused one's only that of its stand-in.
    assert sorted(c["evalstream.result_id"] for c in copies) == sorted(
        r["result_id"] for r in published)
    (copy,) = [c for c in copies if c["evalstream.result_id"] == stand_in["result_id"]]
    assert (copy["evalstream.status"], copy["error.type"]) == ("error", "result_rejected")
    assert "gen_ai.evaluation.score.value" not in copy
