"""The Kafka sink on the real broker: result and dead-letter message shapes, and a dead
letter too large for the producer published without its value instead of blocking."""

from __future__ import annotations

import pytest

from evalstream.config import KafkaSettings, TopicSettings
from evalstream.errors import OutputRejectedError
from evalstream.events import Alert, EvalResult, RawRecord, load_json, utcnow
from evalstream.sinks.kafka import KafkaSink
from tests.support.broker import Broker
from tests.support.kafka import create_topics, read_all, unique

pytestmark = pytest.mark.integration


async def test_messages_carry_keys_and_headers(broker: Broker) -> None:
    topics = TopicSettings(results=unique("res"), dead_letter=unique("dlq"),
                           alerts=unique("alerts"))
    await create_topics(broker.bootstrap, [topics.results, topics.dead_letter, topics.alerts])
    sink = KafkaSink(KafkaSettings(bootstrap_servers=broker.bootstrap, max_request_size=4096),
                     topics)
    await sink.start()
    try:
        await sink.publish_result(EvalResult(result_id="r1", event_id="e1", trace_id="t1",
                                             route="main", evaluator="refusal", score=0.7))
        original = RawRecord("in", 3, 41, b"\x00\xffnot json", key=b"k",
                             headers=(("traceparent", b"00-abc"),))
        await sink.publish_dead_letter(original, "invalid_json", "the value is not valid JSON")
        huge = RawRecord("in", 0, 7, b"x" * 20_000, key=b"big")
        await sink.publish_dead_letter(huge, "too_large", "value of 20000 bytes")
        # A result the producer can never send is this record's problem, not the sink's:
        # OutputRejectedError (the worker publishes an error result instead), not SinkError.
        with pytest.raises(OutputRejectedError, match="MessageSizeTooLargeError"):
            await sink.publish_result(EvalResult(
                result_id="r2", event_id="e2", trace_id="t2", route="main",
                evaluator="refusal", score=0.1, reason="x" * 20_000))
        await sink.publish_alert(Alert(alert_id="a", state="firing", route="main",
                                       evaluator="refusal", kind="pass_rate_drop",
                                       first_seen=utcnow()), "main/refusal")
    finally:
        await sink.stop()

    (result,) = await read_all(broker.bootstrap, topics.results, expect=1)
    assert result.key == b"t1"  # type: ignore[attr-defined]
    assert dict(result.headers) == {  # type: ignore[attr-defined]
        "evaluator": b"refusal", "route": b"main", "schema_version": b"1.3"}
    assert load_json(result.value)["result_id"] == "r1"  # type: ignore[attr-defined]

    dead = await read_all(broker.bootstrap, topics.dead_letter, expect=2)
    by_key = {r.key: r for r in dead}  # type: ignore[attr-defined]
    small = by_key[b"k"]
    assert small.value == b"\x00\xffnot json"  # byte for byte
    headers = dict(small.headers)
    assert headers["reason"] == b"invalid_json"
    assert headers["source_topic"] == b"in"
    assert headers["source_partition"] == b"3"
    assert headers["source_offset"] == b"41"
    assert headers["traceparent"] == b"00-abc"  # the original headers travel along
    big = by_key[b"big"]
    assert big.value in (b"", None)
    assert dict(big.headers)["truncated_size"] == b"20000"
    (alert,) = await read_all(broker.bootstrap, topics.alerts, expect=1)
    assert alert.key == b"main/refusal"  # type: ignore[attr-defined]


async def test_the_largest_error_result_fits_a_max_request_size_at_the_floor(
        broker: Broker) -> None:
    # The floor start-up checks kafka.max_request_size against is what the producer
    # counts: at the floor the worst error result (every clipped field at its limit, the
    # key of 4-byte characters) is accepted; one byte below, refused.
    from evalstream.app.pipeline import Pipeline
    from evalstream.metrics import Metrics
    from evalstream.sinks.kafka import result_record_bytes
    from tests.unit.pipeline_doubles import JUDGES, settings

    (worst,) = Pipeline(settings(), JUDGES, Metrics()).largest_error_results()
    worst = worst.model_copy(update={"trace_id": "\U0001f600" * len(worst.trace_id)})
    floor = result_record_bytes(worst, widest_key=True)
    assert result_record_bytes(worst) == floor  # the widest key is this one's exact size
    topics = TopicSettings(results=unique("res"), dead_letter=unique("dlq"),
                           alerts=unique("alerts"))
    await create_topics(broker.bootstrap, [topics.results, topics.dead_letter])
    for limit, fits in ((floor, True), (floor - 1, False)):
        sink = KafkaSink(KafkaSettings(bootstrap_servers=broker.bootstrap,
                                       max_request_size=limit), topics, alerts=False)
        await sink.start()
        try:
            if fits:
                await sink.publish_result(worst)
            else:
                with pytest.raises(OutputRejectedError, match="MessageSizeTooLargeError"):
                    await sink.publish_result(worst)
        finally:
            await sink.stop()
    (published,) = await read_all(broker.bootstrap, topics.results, expect=1)
    assert load_json(published.value)["status"] == "error"  # type: ignore[attr-defined]
