"""The Kafka sink: one producer for results, dead letters and alerts (and, when
``topics.otel_results`` is set, each result again as an OpenTelemetry event).

Every publish awaits the broker's acknowledgement (acks=all) before returning, so the
worker only commits offsets for work that is durable. The idempotent producer stays off:
the Tansu broker does not support it, and duplicates are harmless because results carry
a deterministic ``result_id``.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    PolicyViolationError,
    RecordListTooLargeError,
    TopicAuthorizationFailedError,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from evalstream.config import KafkaSettings, TopicSettings
from evalstream.config.kafka import build_client
from evalstream.errors import OutputRejectedError, OutputTopicMissingError, SinkError
from evalstream.events import Alert, EvalResult, Record, dump_json
from evalstream.logging import LogLimit, get_logger
from evalstream.sinks.headers import DLQ_TRUNCATED, dead_letter_headers, result_headers
from evalstream.sinks.otel_results import otel_result

__all__ = ["KafkaSink", "result_record_bytes"]

log = get_logger(__name__)

_RETRY_BACKOFF_S = 0.5
_RETRY_BACKOFF_MAX_S = 10.0
#: Broker or client refusals of one record that no retry can change.
_REJECTED = (MessageSizeTooLargeError, RecordListTooLargeError, PolicyViolationError)
#: How long start-up waits for one output topic to show in the broker's metadata. aiokafka
#: would wait its ``request_timeout_ms`` (40 s) for a missing one, longer than a start-up
#: attempt may take near the end of ``kafka.connect_timeout_s`` (``app/connect.py``, 5 s
#: at least), which then failed as "no answer from Kafka" instead of naming the topic.
_TOPIC_CHECK_S = 3.0
#: The longest original key a dead letter refused as too large keeps (see
#: ``publish_dead_letter``); a longer one is dropped with the value.
_MAX_TRUNCATED_KEY_BYTES = 1_024


def crc32_partitioner(key: bytes | None, all_partitions: Sequence[int],
                      available: Sequence[int]) -> int:
    """Pick the partition for ``key``: the same key always goes to the same partition.

    aiokafka's ``DefaultPartitioner`` hashes with a pure-Python murmur2 (~16 us per result
    key, a measurable share of the worker's CPU per evaluated event); ``zlib.crc32`` runs in
    C (~0.3 us). Consumers of the results topic rely only on "one key, one partition"
    (results are still keyed by ``trace_id``, so a trace's results stay in order), not on
    the Java client's murmur2 placement, which evalstream never promised. Keyless records
    (dead letters of keyless messages) go to a random partition, as before.

    Args:
        key: The record key, or None.
        all_partitions: Every partition id of the topic, sorted.
        available: Partitions with a leader right now.

    Returns:
        The partition id.
    """
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[zlib.crc32(key) % len(all_partitions)]


def result_record_bytes(result: EvalResult, *, widest_key: bool = False) -> int:
    """The size the producer checks against ``kafka.max_request_size`` for ``result``
    (:meth:`KafkaSink.publish_result`'s key, value and headers).

    ``widest_key``: count the key (the trace id) at 4 bytes a character, the most UTF-8
    takes, for a bound over every trace id of that length rather than this one's size.
    """
    key = (b"k" * 4 * len(result.trace_id)) if widest_key else result.trace_id.encode()
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(
        key, dump_json(result), result_headers(result.route, result.evaluator))
    return size


class KafkaSink:
    """Publishes to the configured results, dead-letter and alerts topics.

    Args:
        settings: Connection and producer settings.
        topics: Output topic names.
        alerts: Whether alerts will be published (drift on): then ``start`` checks the
            alerts topic too.
    """

    def __init__(self, settings: KafkaSettings, topics: TopicSettings, *,
                 alerts: bool = False) -> None:
        self._settings = settings
        self._topics = topics
        self._alerts = alerts
        self._producer: AIOKafkaProducer | None = None
        #: Result headers by (route, evaluator): a handful of constant lists, built once.
        self._result_headers: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
        #: When publishing started failing with retriable errors (None: it works).
        self._outage_since: float | None = None
        #: Both repeat per record while their cause lasts (a size limit, a topic policy),
        #: at the message rate: a burst of lines each, then one a second. Each copy given
        #: up is counted (evalstream_otel_results_rejected_total), each truncated dead
        #: letter carries the truncated_size header.
        self._otel_rejected_logs = LogLimit()
        self._truncated_logs = LogLimit()
        #: The OTel copy's scope version (evalstream's), looked up once and only when on.
        self._version = ""
        if topics.otel_results:
            # Here, not at import: a start-up that writes no OTel events does not pay for
            # the version lookup (importlib.metadata).
            from evalstream import __version__
            self._version = __version__

    def client(self) -> AIOKafkaProducer:
        """The producer, built but not started (call from a running event loop).

        Raises:
            ConfigError: aiokafka refuses an option.
        """
        s = self._settings
        options: dict[str, Any] = {
            "acks": "all",
            "enable_idempotence": False,
            "partitioner": crc32_partitioner,
            "linger_ms": s.producer_linger_ms,
            "max_batch_size": min(s.producer_batch_bytes, s.max_request_size),
            "compression_type": s.producer_compression,
            "max_request_size": s.max_request_size,
        }
        options.update(s.client_options("producer"))
        return build_client(AIOKafkaProducer, options, "producer")

    async def start(self) -> None:
        """Connect the producer.

        Raises:
            SinkError: the broker cannot be reached.
            ConfigError: aiokafka refuses an option.
        """
        producer = self.client()
        try:
            await self._connect(producer)
        except BaseException:  # failed, or start-up's deadline cancelled it: close it
            await producer.stop()
            raise
        self._producer = producer

    async def _connect(self, producer: AIOKafkaProducer) -> None:
        """Start ``producer`` and check that the output topics exist."""
        try:
            await producer.start()
        except KafkaError as exc:
            raise SinkError(f"cannot connect producer to {self._settings.bootstrap_servers}: "
                            f"{exc}") from exc
        # A missing output topic (brokers with auto-creation off) would otherwise show only
        # at the first result, or first bad message, as a 40 s wait and a crash; a missing
        # alerts topic at the first drift alert, hours or days into the run.
        needed = [self._topics.results, self._topics.dead_letter]
        if self._topics.otel_results:
            needed.append(self._topics.otel_results)
        if self._alerts:
            needed.append(self._topics.alerts)
        for topic in needed:
            try:
                async with asyncio.timeout(_TOPIC_CHECK_S):
                    await producer.partitions_for(topic)
            except TimeoutError:
                raise OutputTopicMissingError(
                    f"output topic {topic!r} is not in the broker's metadata after "
                    f"{_TOPIC_CHECK_S:g}s (or the broker is slow to answer): create it, or "
                    f"let the broker auto-create topics") from None
            except TopicAuthorizationFailedError as exc:
                # Waited for like a missing topic (an operator may be granting it), but
                # the fix is an ACL: the topic may well exist.
                raise OutputTopicMissingError(
                    f"output topic {topic!r}: the producer is not authorised to use it "
                    f"(TopicAuthorizationFailedError): grant it DESCRIBE and WRITE") from exc
            except KafkaError as exc:
                raise OutputTopicMissingError(
                    f"output topic {topic!r} is not available ({type(exc).__name__}): "
                    f"create it, or let the broker auto-create topics") from exc

    def _require(self) -> AIOKafkaProducer:
        if self._producer is None:
            raise SinkError("the sink is not started")
        return self._producer

    async def _deliver(self, topic: str, value: bytes, key: bytes | None,
                       headers: list[tuple[str, bytes]]) -> None:
        """Send one record and wait for its ack, riding out a broker outage.

        Retriable errors (the broker restarting, a leader moving: aiokafka gives up on a
        batch after ``request_timeout_ms``) are retried with backoff for up to
        ``kafka.connect_timeout_s``, so a short outage holds the work (in-flight is
        bounded) instead of stopping the worker; then ``SinkError`` says so. Anything else
        is raised as it is.
        """
        producer = self._require()
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self._settings.connect_timeout_s
        backoff = _RETRY_BACKOFF_S
        while True:
            try:
                ack = await producer.send(topic, value=value, key=key, headers=headers)
                await ack
            except KafkaError as exc:
                # KafkaTimeoutError is not marked retriable, but aiokafka raises it when a
                # send waited request_timeout_ms for its partition's full batch to drain:
                # the broker not answering, as retriable as the batch's own timeout.
                if not (exc.retriable or isinstance(exc, KafkaTimeoutError)):
                    raise
                if loop.time() + backoff > deadline:
                    raise SinkError(
                        f"publish to {topic}: no acknowledgement from the broker within "
                        f"kafka.connect_timeout_s ({self._settings.connect_timeout_s:g}s; "
                        f"tried for {loop.time() - started:.1f}s), last error: "
                        f"{type(exc).__name__}") from exc
                if self._outage_since is None:  # one line per outage, not per record
                    self._outage_since = loop.time()
                    # ``output_topic``, not ``topic``: the log context already holds the
                    # input message's topic, partition and offset.
                    log.warning("publish_retrying", output_topic=topic,
                                error=type(exc).__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RETRY_BACKOFF_MAX_S)
                continue
            if self._outage_since is not None:
                log.info("publish_recovered", output_topic=topic,
                         retried_for_s=round(loop.time() - self._outage_since, 1))
                self._outage_since = None
            return

    async def _send(self, topic: str, value: bytes, key: bytes | None,
                    headers: list[tuple[str, bytes]]) -> None:
        try:
            await self._deliver(topic, value, key, headers)
        except _REJECTED as exc:
            # This record can never be written; stopping the worker would only bring its
            # message back to fail again after every restart.
            raise OutputRejectedError(f"{topic} refused a record of {len(value)} bytes: "
                                      f"{type(exc).__name__}") from exc
        except KafkaError as exc:
            raise SinkError(f"publish to {topic} failed: {type(exc).__name__}: {exc}") from exc

    async def publish_result(self, result: EvalResult) -> bool:
        """Publish one result; returns once acknowledged (with ``topics.otel_results`` set:
        once the result and then its OTel event are). False when the OTel event was refused
        for good and given up (the result is published): the caller counts it.

        The OTel event is sent only once the result is acknowledged, never beside it: a
        result the broker refuses for good (too large, a topic policy) then has no copy,
        and the error result the worker publishes in its place is the only one under its
        ``result_id``. This costs each result one more ack round trip, which many
        evaluations in flight hide (README, "OpenTelemetry results", has the figures).
        """
        names = (result.route, result.evaluator)
        headers = self._result_headers.get(names)
        if headers is None:
            headers = self._result_headers[names] = result_headers(*names)
        key = result.trace_id.encode()
        topics = self._topics
        value = dump_json(result)
        if not topics.otel_results:
            await self._send(topics.results, value, key, headers)
            return True
        # Built before the result is sent: an event that cannot be encoded fails the publish
        # while nothing is written, not after the result is durable (the error result
        # standing in for it would be a second result under the same result_id).
        event = otel_result(result, service_name=self._settings.client_id,
                            scope_version=self._version, encoding=topics.otel_encoding,
                            observed_ns=time.time_ns())
        # Refused (for good or not), the result raises here and no copy is sent. The
        # offset is committed only once this returns, so once both are durable.
        await self._send(topics.results, value, key, headers)
        try:
            # The same key: the same partitioning.
            await self._send(topics.otel_results, event, key, [])
        except OutputRejectedError as exc:
            # The result itself is durable. Raising would have the worker publish an error
            # result in its place: a second result under the same result_id. The copy is
            # the one given up (it can never be written), and said.
            if (fields := self._otel_rejected_logs.fields()) is not None:
                log.error("otel_result_rejected", output_topic=topics.otel_results,
                          result_id=result.result_id, error=str(exc), **fields)
            return False
        return True

    async def publish_dead_letter(self, record: Record, reason: str, error: str) -> None:
        """Publish the original bytes with the reason; returns once acknowledged.

        A message too large for the producer is published without its value, its own
        headers and a long key (headers say so) rather than blocking its partition forever.
        """
        headers = dead_letter_headers(record, reason, error)
        value = record.value or b""
        topic = self._topics.dead_letter
        try:
            try:
                await self._deliver(topic, value, record.key, headers)
            except MessageSizeTooLargeError:
                if (fields := self._truncated_logs.fields()) is not None:
                    log.warning("dead_letter_truncated", size=len(value), **fields)
                # The message's own headers and key can be as large as its value: the
                # stand-in keeps only ours (and a short key), so it fits whatever the
                # message held. Refused too, it would stop the worker on every restart.
                headers = dead_letter_headers(record, reason, error, own_headers=False)
                headers.append((DLQ_TRUNCATED, str(len(value)).encode()))
                key = record.key
                if key is not None and len(key) > _MAX_TRUNCATED_KEY_BYTES:
                    key = None
                await self._deliver(topic, b"", key, headers)
        except KafkaError as exc:
            raise SinkError(f"dead letter publish failed: {type(exc).__name__}: {exc}") from exc

    async def publish_alert(self, alert: Alert, key: str) -> None:
        """Publish one alert (key = route/evaluator); returns once acknowledged."""
        await self._send(self._topics.alerts, dump_json(alert), key.encode(),
                         [("schema_version", alert.schema_version.encode()),
                          ("state", alert.state.encode())])

    async def flush(self) -> None:
        """Wait for every pending send."""
        if self._producer is not None:
            await self._producer.flush()

    async def stop(self) -> None:
        """Flush and close the producer."""
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()
