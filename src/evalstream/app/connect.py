"""Reaching the broker at start-up: start the sink, then the source, retrying with backoff.

A broker that comes up after the worker is normal in a cluster, so an unreachable one is
retried for up to ``kafka.connect_timeout_s``; each attempt is bounded too, and a stop
requested meanwhile (SIGTERM to a pod still starting) cancels the attempt under way.
"""

from __future__ import annotations

import asyncio

from evalstream.app.waits import unless_set, wait_set
from evalstream.config import KafkaSettings
from evalstream.errors import OutputTopicMissingError, SinkError, SourceError
from evalstream.logging import get_logger
from evalstream.sinks.base import Sink
from evalstream.sources.base import RebalanceHandler, Source

__all__ = ["connect"]

log = get_logger(__name__)

_CONNECT_BACKOFF_S = 0.5
_CONNECT_BACKOFF_MAX_S = 10.0
#: A connection attempt may take what is left of ``kafka.connect_timeout_s``, and at least
#: this (a TLS and SASL handshake over a slow link), so the last one is never cut to nothing.
_CONNECT_ATTEMPT_MIN_S = 5.0


async def connect(sink: Sink, source: Source, handler: RebalanceHandler,
                  kafka: KafkaSettings, stop: asyncio.Event) -> None:
    """Start the sink and the source, retrying an unreachable broker with backoff for
    up to ``kafka.connect_timeout_s`` (a broker that comes up after us is normal in a
    cluster); a stop requested meanwhile cancels the attempt under way and returns.

    Args:
        sink: Started first (once; a failed source start does not restart it).
        source: Started with ``handler``.
        handler: Hears about the source's partition (re)assignments.
        kafka: ``connect_timeout_s`` and ``bootstrap_servers`` (named in the error).
        stop: Set to give up (the attempt under way is cancelled; a clean return).

    Raises:
        SinkError | SourceError: still unreachable when the time is up.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + kafka.connect_timeout_s
    backoff = _CONNECT_BACKOFF_S
    sink_started = False

    async def attempt() -> None:
        nonlocal sink_started
        if not sink_started:
            await sink.start()
            sink_started = True
        await source.start(handler)

    while not stop.is_set():
        # Bounded here too: a TLS client at a plaintext listener (or a firewall that
        # drops packets) gets no answer at all, and aiokafka would wait out its
        # request_timeout_ms (40 s by default) whatever connect_timeout_s says.
        attempt_s = max(deadline - loop.time(), _CONNECT_ATTEMPT_MIN_S)
        try:
            try:
                async with asyncio.timeout(attempt_s):
                    # A stop cancels the attempt (SIGTERM to a pod still starting):
                    # waiting it out could take longer than the pod's grace period.
                    if not await unless_set(stop, attempt()):
                        return
            except TimeoutError:
                raise SourceError(
                    f"no answer from Kafka at {kafka.bootstrap_servers} "
                    f"within {attempt_s:.1f} s: is kafka.security_protocol the listener's "
                    f"(SSL against a plaintext port waits like this), or are packets "
                    f"dropped on the way?") from None
            return
        except (SourceError, SinkError) as exc:
            if stop.is_set():
                return  # asked to stop meanwhile: nothing was taken, a clean exit
            if loop.time() + backoff > deadline:
                raise
            # A missing output topic waits like the broker (an operator may be creating
            # it), but is named for what it is: the fix is a topic, not the network.
            event = ("output_topic_missing" if isinstance(exc, OutputTopicMissingError)
                     else "broker_unreachable")
            log.warning(event, error=str(exc), retry_in_s=backoff)
        if await wait_set(stop, backoff):
            return
        backoff = min(backoff * 2, _CONNECT_BACKOFF_MAX_S)
