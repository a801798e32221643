"""KafkaSink publishing through a broker outage: retriable errors are waited out (within
kafka.connect_timeout_s), permanent ones are not."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    TopicAuthorizationFailedError,
)

from evalstream.config import KafkaSettings, TopicSettings
from evalstream.errors import SinkError
from evalstream.events import EvalResult
from evalstream.sinks import kafka as sink_module
from evalstream.sinks.kafka import KafkaSink

RESULT = EvalResult(result_id="r", event_id="e", trace_id="t", route="main",
                    evaluator="refusal", score=0.9)


class _Producer:
    """Fails its first ``failures`` sends with ``error``, then acknowledges."""

    def __init__(self, error: KafkaError, failures: int) -> None:
        self.error, self.failures, self.sends = error, failures, 0

    async def send(self, topic: str, **_: Any) -> asyncio.Future[None]:
        self.sends += 1
        ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.sends <= self.failures:
            ack.set_exception(self.error)  # as aiokafka reports an expired batch
        else:
            ack.set_result(None)
        return ack


def _sink(producer: _Producer, connect_timeout_s: float = 30.0) -> KafkaSink:
    sink = KafkaSink(KafkaSettings(connect_timeout_s=connect_timeout_s),
                     TopicSettings(results="res", dead_letter="dlq", alerts="alerts"))
    sink._producer = producer  # type: ignore[assignment]
    return sink


async def test_a_short_outage_is_ridden_out_with_one_warning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "_RETRY_BACKOFF_S", 0.001)
    producer = _Producer(NodeNotReadyError(), failures=3)
    with structlog.testing.capture_logs() as logs, \
            structlog.contextvars.bound_contextvars(topic="in", partition=2, offset=7):
        await _sink(producer).publish_result(RESULT)
    assert producer.sends == 4
    assert [e["event"] for e in logs] == ["publish_retrying", "publish_recovered"]
    # The output topic under its own name: the bound input topic is not overwritten.
    assert [e["output_topic"] for e in logs] == ["res", "res"]
    assert all("topic" not in e for e in logs)


async def test_permanent_errors_and_outages_past_the_budget_are_sink_errors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sink_module, "_RETRY_BACKOFF_S", 0.001)
    producer = _Producer(TopicAuthorizationFailedError(), failures=1)
    with pytest.raises(SinkError, match="TopicAuthorizationFailedError"):
        await _sink(producer).publish_result(RESULT)
    assert producer.sends == 1  # not retried

    producer = _Producer(NodeNotReadyError(), failures=10**6)
    # Names the setting that ran out, so on-call knows what gave up and after how long.
    with pytest.raises(SinkError, match=r"within kafka.connect_timeout_s \(0.05s.*NodeNotReady"):
        await _sink(producer, connect_timeout_s=0.05).publish_result(RESULT)
    assert producer.sends > 1


async def test_a_send_timed_out_waiting_for_a_full_batch_is_retried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """aiokafka raises KafkaTimeoutError, not marked retriable, when a send waited
    request_timeout_ms for its partition's full batch to drain: a broker outage (small
    ``producer_batch_bytes``, or large dead letters), which stopped the worker after one
    request timeout instead of ``kafka.connect_timeout_s``."""
    monkeypatch.setattr(sink_module, "_RETRY_BACKOFF_S", 0.001)
    producer = _Producer(KafkaTimeoutError(), failures=2)
    await _sink(producer).publish_result(RESULT)
    assert producer.sends == 3
