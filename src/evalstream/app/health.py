"""A tiny HTTP server for Kubernetes probes and Prometheus scrapes.

``/metrics`` (Prometheus text format), ``/healthz`` (the process is alive and its loop
responds) and ``/readyz`` (the broker answered the last connection check, see
``watch_connection``, and partitions are assigned). It runs on the worker's event loop
with ``asyncio.start_server``: three GET endpoints do not justify a web framework
dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from urllib.parse import parse_qs

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from evalstream.logging import get_logger
from evalstream.metrics import Metrics
from evalstream.sources.base import Source, Unfinished

__all__ = ["NO_PARTITIONS", "HealthServer", "not_ready_reason", "watch_connection", "watch_lag",
           "watch_readiness"]

#: The reason a connected worker is not ready when the group gave it no partition.
NO_PARTITIONS = "no partitions assigned"

log = get_logger(__name__)


def not_ready_reason(*, stopping: bool, started: bool, source: Source) -> str | None:
    """Why a consuming service (the worker, the label joiner) is not ready, or None when it
    is: what /readyz tells on-call."""
    if stopping:
        return "stopping"
    if not started:
        return "connecting to the broker"
    if not source.connected:
        return "the broker did not answer the last check"
    if not source.assignment():
        # e.g. more replicas than partitions, or an input topic that does not exist
        return NO_PARTITIONS
    return None

_READ_TIMEOUT_S = 5.0
_MAX_REQUEST_BYTES = 16_384
_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}


class HealthServer:
    """Serves /metrics, /healthz and /readyz.

    Args:
        host: Interface to bind.
        port: Port to bind (0 picks a free one; see :attr:`port`).
        registry: The registry /metrics exposes.
        not_ready: Why the worker is not ready (e.g. ``no partitions assigned``), or None when
            it is; /readyz answers 503 with the reason (for ``curl``; the kubelet keeps
            probe bodies out of its events, so ``watch_readiness`` logs it too).
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry,
                 not_ready: Callable[[], str | None]) -> None:
        self._host = host
        self._port = port
        self._registry = registry
        self._not_ready = not_ready
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self._server is None or not self._server.sockets:
            return self._port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and start serving."""
        self._server = await asyncio.start_server(self._handle, self._host, self._port)

    async def stop(self) -> None:
        """Stop serving."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2.0)

    def _respond(self, method: str, path: str) -> tuple[int, str, bytes]:
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"method not allowed\n"
        path, _, query = path.partition("?")
        if path == "/metrics":
            # ``name[]=`` selects series, as prometheus_client's own handler does: a poller
            # that wants one counter should not cost the worker the whole exposition.
            names = parse_qs(query).get("name[]")
            registry = self._registry.restricted_registry(names) if names else self._registry
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            reason = self._not_ready()
            if reason is None:
                return 200, "text/plain", b"ready\n"
            return 503, "text/plain", f"not ready: {reason}\n".encode()
        return 404, "text/plain", b"not found\n"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            if len(head) > _MAX_REQUEST_BYTES:
                return
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = request_line.split(" ")
            if len(parts) != 3:
                return
            method, path = parts[0], parts[1]
            status, content_type, body = self._respond(method, path)
            header = (f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                      f"Content-Type: {content_type}\r\n"
                      f"Content-Length: {len(body)}\r\n"
                      "Connection: close\r\n\r\n").encode("latin-1")
            writer.write(header if method == "HEAD" else header + body)
            await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # a probe that hung up or sent garbage; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def watch_lag(source: Source, metrics: Metrics, interval_s: float = 1.0,
                    unfinished: Unfinished | None = None) -> None:
    """Refresh the consumer-lag gauges every ``interval_s`` until cancelled.

    The gauge counts the messages not yet done: from ``unfinished(tp)``, the lowest offset
    whose work is not complete (the worker's ``OffsetTracker.unfinished``), to the end. From
    the consumer's position it read 0 under backpressure, with messages fetched and waiting
    for a slot, being evaluated or held in a session window (what an operator alerts and
    scales on; KEDA, reading committed offsets, saw them).

    A partition revoked by a rebalance loses its series: its lag is now reported by the
    replica that took it, and a frozen last value here would double-count in sums and keep
    lag alerts firing.
    """
    exported: set[tuple[str, str]] = set()
    while True:
        try:
            current = {(topic, str(partition)): lag
                       for (topic, partition), lag in (await source.lag(unfinished)).items()}
            for labels, lag in current.items():
                metrics.consumer_lag.labels(*labels).set(lag)
            for labels in exported - current.keys():
                with contextlib.suppress(KeyError):
                    metrics.consumer_lag.remove(*labels)
            exported = set(current)
        except Exception as exc:  # lag is informational; never stop for it
            log.debug("lag_failed", error=str(exc))
        await asyncio.sleep(interval_s)


async def watch_connection(source: Source, interval_s: float = 5.0,
                           timeout_s: float = 3.0) -> None:
    """Let ``source`` check its broker every ``interval_s`` (readiness reads the answer)."""
    while True:
        try:
            await source.check(timeout_s)
        except Exception as exc:  # a check that fails oddly must not stop the worker
            log.debug("connection_check_failed", error=str(exc))
        await asyncio.sleep(interval_s)


async def watch_readiness(not_ready: Callable[[], str | None], metrics: Metrics,
                          ready_event: asyncio.Event | None, inputs: Sequence[str],
                          warn_after_s: float = 60.0) -> None:
    """Mirror readiness into ``evalstream_ready``, set ``ready_event``, log each change.

    Every change of the reason ``not_ready`` gives is logged (``readiness``): the kubelet
    keeps a failed probe's body out of its events, so the logs are where on-call reads why
    a pod is not ready. A worker left without partitions for ``warn_after_s`` also gets a
    warning naming its inputs; a broker that does not answer is a different reason (and is
    logged by the connection check), not a topic problem.
    """
    loop = asyncio.get_running_loop()
    unready_since = loop.time()
    warned = False
    last: str | None = ""  # no reason yet: the first state is logged too
    while True:
        reason = not_ready()
        metrics.ready.set(1 if reason is None else 0)
        if reason != last:
            log.info("readiness", ready=reason is None, reason=reason)
            last = reason
        if reason is None:
            unready_since = loop.time()
            warned = False
            if ready_event is not None:
                ready_event.set()
        elif (reason == NO_PARTITIONS and not warned
              and loop.time() - unready_since > warn_after_s):
            # Usually a misspelt or missing input topic, or more replicas than partitions.
            log.warning("no_partitions_assigned", waited_s=warn_after_s, inputs=list(inputs))
            warned = True
        await asyncio.sleep(0.05 if ready_event is not None and reason is not None else 1.0)
