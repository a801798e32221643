"""``evalstream demo``: the whole loop on one machine, with nothing to install or configure.

It starts an embedded Kafka-compatible broker (Tansu), creates the topics, runs the real
worker with the builtin offline judge, and writes realistic traffic for three applications
(``app.traffic``). After ``--spike-after`` seconds the support bot goes off-topic for
``--spike-duration`` seconds; the drift detector fires an alert and resolves it once the
traffic recovers. Results and alerts are read back from their Kafka topics and shown live
(``app.dashboard_view``); on a pipe the view becomes plain periodic lines.

Ctrl-C (SIGINT), SIGTERM or SIGHUP (a closed terminal) stops it cleanly: traffic stops,
the worker drains and commits, the broker shuts down, exit code 0. A second Ctrl-C exits
at once (code 130), killing the broker on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from evalstream.app.dashboard_view import DemoState, Phase
from evalstream.app.embedded import EmbeddedBroker, EmbeddedBrokerError, create_topics, free_port
from evalstream.app.signals import install_stop_signals
from evalstream.app.traffic import SUPPORT_SCOPE, TUTOR_ROLE, TrafficMix, share_of
from evalstream.app.waits import wait_set
from evalstream.app.worker import Worker
from evalstream.config import Settings, load_settings
from evalstream.events import Alert, EvalResult, dump_json
from evalstream.logging import configure_logging

__all__ = ["add_arguments", "demo_settings", "main"]

TRACES_TOPIC = "demo.llm.traces"
_READY_TIMEOUT_S = 30.0

_REAL_SETUP = """\
To point evalstream at a real cluster and a real judge, write a config file:

  kafka:
    bootstrap_servers: kafka-1:9092,kafka-2:9092   # SASL: EVALSTREAM_KAFKA__SASL_PASSWORD
  inputs:
    - {topic: otel.spans, format: otlp_proto}       # or flat_json / otlp_json, and
                                                    # otlp_logs_proto / _json for logs
  judges:
    llm: {type: openai, base_url: https://api.openai.com/v1, model: gpt-4o-mini,
          api_key_env: OPENAI_API_KEY}             # any OpenAI-compatible endpoint
  routes:
    - name: support
      match: {app: [support-bot]}
      evaluators:
        - {evaluator: topic_adherence, judge: llm, params: {criteria: "..."}}

then: evalstream check-config my.yaml && evalstream run --config my.yaml
(config/evalstream.example.yaml documents every option)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (the CLI builds the parser and calls :func:`main`)."""
    parser.add_argument("--rate", type=float, default=10.0,
                        help="trace events per second across the three apps (default 10)")
    parser.add_argument("--spike-after", type=float, default=60.0,
                        help="seconds of normal traffic before the off-topic spike (default 60)")
    parser.add_argument("--spike-duration", type=float, default=45.0,
                        help="seconds the off-topic spike lasts (default 45)")
    parser.add_argument("--duration", type=float, default=0.0,
                        help="stop after this many seconds (default 0: run until Ctrl-C)")
    parser.add_argument("--port", type=int, default=9464,
                        help="port for /metrics, /healthz, /readyz (default 9464; 0: any free)")
    parser.add_argument("--seed", type=int, default=7, help="traffic random seed (default 7)")
    parser.add_argument("--interval", type=float, default=5.0,
                        help="seconds between status lines when not on a terminal (default 5)")
    parser.add_argument("--plain", action="store_true",
                        help="print status lines instead of the live view, even on a terminal")
    parser.add_argument("--log-level", default="WARNING",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="worker log level; logs go to stderr (default WARNING)")


def demo_settings(bootstrap: str, port: int, *, rate: float, spike_after: float) -> Settings:
    """The demo's configuration: three routes on the builtin judge and a fast drift detector.

    The drift detector learns each (route, evaluator)'s baseline from roughly the first
    60% of the normal phase, and is tuned to react within seconds at demo volumes
    (production defaults favour fewer false alarms over speed).
    """
    warmup = int(max(20, min(300, share_of("support-bot") * rate * spike_after * 0.6)))
    routes: list[dict[str, Any]] = [
        {"name": "support", "match": {"app": ["support-bot"]}, "evaluators": [
            {"evaluator": "topic_adherence", "params": {"criteria": SUPPORT_SCOPE}},
            {"evaluator": "topic", "params": {
                "topics": {
                    "orders_shipping": "order status, shipping, delivery and tracking",
                    "returns_billing": "returns, refunds, billing, charges and subscriptions",
                    "device_setup": "installation, wifi, the app, firmware, errors and "
                                    "troubleshooting of the thermostat",
                },
                "fail_topics": ["other"]}},
            {"evaluator": "refusal"},
            {"evaluator": "sentiment"},
        ]},
        {"name": "tutor", "match": {"app": ["tutor-bot"]}, "evaluators": [
            {"evaluator": "role_adherence", "params": {"chatbot_role": TUTOR_ROLE}},
            {"evaluator": "sentiment"},
        ]},
        {"name": "travel", "match": {"app": ["travel-bot"]}, "evaluators": [
            {"evaluator": "refusal"},
            {"evaluator": "sentiment"},
        ]},
    ]
    settings = load_settings(
        None,
        kafka={"bootstrap_servers": bootstrap, "group_id": "evalstream-demo",
               "auto_offset_reset": "earliest", "client_id": "evalstream-demo",
               # Tansu holds a new group's first join for about half the session
               # timeout; a short one gets the demo going in seconds.
               "session_timeout_ms": 6000},
        inputs=[{"topic": TRACES_TOPIC, "format": "flat_json"}],
        topics={"results": "demo.evalstream.results", "alerts": "demo.evalstream.alerts",
                "dead_letter": "demo.evalstream.dlq"},
        routes=routes,
        worker={"shutdown_timeout_s": 10.0, "commit_interval_s": 1.0},
        server={"host": "127.0.0.1", "port": port},
        drift={"windows_s": [30, 300], "bucket_s": 5, "min_samples": 20, "tick_s": 0.5,
               "warmup_samples": warmup, "min_shift": 0.15, "arl0": 20_000.0,
               "min_detect_samples": 20, "watch_labels": {"sentiment": "negative"},
               # Hysteresis sized so an alert stays up until the recovery shows in the
               # 30 s window too, rather than a few good answers after the spike ends.
               "cap_ratio": 2.5, "resolve_ratio": 0.5},
    )
    # EVALSTREAM_* variables win over everything else in load_settings; the demo's broker
    # is not negotiable, so pin it back.
    if settings.kafka.bootstrap_servers != bootstrap:
        settings = settings.model_copy(update={"kafka": settings.kafka.model_copy(
            update={"bootstrap_servers": bootstrap})})
    return settings


class _Out:
    """Writes lines to stdout, flushed (a pipe must see them as they happen).

    When the reader goes away (``evalstream demo | head``, a closed terminal),
    ``on_closed`` is called once
    (the demo stops, as on Ctrl-C) and later lines are dropped: the demo ran on unseen,
    then ended in a ``BrokenPipeError`` traceback.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.on_closed: Callable[[], None] | None = None
        self._closed = False

    def line(self, text: str = "") -> None:
        if self._closed:
            return
        try:
            self.stream.write(text + "\n")
            self.stream.flush()
        except OSError:  # EPIPE from a pipe, EIO from a terminal that was closed
            self._closed = True
            # What is still buffered goes nowhere, so the interpreter's last flush is
            # quiet too ("Exception ignored ... BrokenPipeError" otherwise).
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
            if self.on_closed is not None:
                self.on_closed()


async def _traffic(producer: Any, state: DemoState, phase: Phase, rate: float, seed: int,
                   stop: asyncio.Event) -> None:
    rng = random.Random(seed)
    mix = TrafficMix(rng=rng)
    while not stop.is_set():
        event = mix.next_event(datetime.now(UTC), incident=phase.incident(state.elapsed()))
        await producer.send(TRACES_TOPIC, dump_json(event),
                            key=str(event["session_id"]).encode())
        state.on_sent(str(event["app"]))
        # Poisson arrivals: exponential gaps at the requested mean rate.
        await wait_set(stop, rng.expovariate(rate))


async def _read_outputs(settings: Settings, state: DemoState, out: _Out | None,
                        stop: asyncio.Event) -> None:
    """Read results and alerts back from Kafka, as a downstream consumer would."""
    from aiokafka import AIOKafkaConsumer

    topics = settings.topics
    consumer = AIOKafkaConsumer(
        topics.results, topics.alerts, bootstrap_servers=settings.kafka.bootstrap_servers,
        group_id=None, auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                for record in records:
                    if record.value is None:
                        continue
                    if record.topic == topics.results:
                        state.on_result(EvalResult.model_validate_json(record.value))
                    else:
                        line = state.on_alert(Alert.model_validate_json(record.value))
                        if out is not None:
                            out.line(f"ALERT {line}")
    finally:
        await consumer.stop()


async def _show(state: DemoState, out: _Out, live: bool, interval: float,
                stop: asyncio.Event) -> None:
    if live:
        from rich.console import Console
        from rich.live import Live

        console = Console(file=out.stream)
        with Live(state.render(), console=console, auto_refresh=False,
                  redirect_stderr=False) as view:
            while not stop.is_set():
                view.update(state.render(), refresh=True)
                await wait_set(stop, 0.5)
            view.update(state.render(), refresh=True)
        return
    while not stop.is_set():
        await wait_set(stop, interval)
        out.line(state.plain_line())


async def _demo(args: argparse.Namespace, out: _Out, live: bool) -> int:
    from aiokafka import AIOKafkaProducer

    stop = asyncio.Event()
    broker = EmbeddedBroker()
    # A second Ctrl-C: no drain. The broker is in a session of its own (a terminal's
    # Ctrl-C reaches the demo only), so it is killed on the way out, not left running.
    install_stop_signals(stop.set, before_forced_exit=broker.kill)
    # A closed terminal (SIGHUP) stops it as Ctrl-C does: by default it ended the demo at
    # once, and the broker, in a session of its own, ran on.
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, stop.set)
    out.on_closed = stop.set
    port = args.port or free_port()
    try:
        await asyncio.to_thread(broker.start)
    except EmbeddedBrokerError as exc:
        print(f"evalstream demo: {exc}", file=sys.stderr)
        return 1
    worker_code = 1
    try:
        settings = demo_settings(broker.bootstrap, port, rate=args.rate,
                                 spike_after=args.spike_after)
        topics = settings.topics
        await create_topics(broker.bootstrap, [TRACES_TOPIC, topics.results, topics.alerts,
                                               topics.dead_letter])
        worker = Worker(settings)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        phase = Phase(args.spike_after, args.spike_duration)
        state = DemoState(phase, metrics_url)
        out.line(f"evalstream demo: embedded Kafka broker (Tansu) at {broker.bootstrap}")
        out.line(f"  traces -> {TRACES_TOPIC}; results -> {topics.results}; "
                 f"alerts -> {topics.alerts}")
        out.line(f"  judge: builtin (offline); routes: "
                 f"{', '.join(r.name for r in settings.routes)}")
        out.line(f"  metrics: {metrics_url}  (also /healthz, /readyz)")
        out.line(f"  traffic: {args.rate:g} events/s; off-topic spike at "
                 f"t+{args.spike_after:g}s for {args.spike_duration:g}s")
        out.line()

        ready = asyncio.Event()
        worker_task = asyncio.create_task(worker.run(ready), name="worker")
        waiter = asyncio.create_task(ready.wait())
        await asyncio.wait({worker_task, waiter, asyncio.create_task(stop.wait())},
                           timeout=_READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not ready.is_set():
            worker.request_stop()
            worker_code = await worker_task
            if stop.is_set():
                return 0
            print(f"evalstream demo: the worker did not start (see the log above; if port "
                  f"{port} is taken, pass --port 0 for any free port)", file=sys.stderr)
            return 1

        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
        await producer.start()
        reader_stop = asyncio.Event()
        traffic = asyncio.create_task(
            _traffic(producer, state, phase, args.rate, args.seed, stop))
        reader = asyncio.create_task(
            _read_outputs(settings, state, None if live else out, reader_stop))
        view = asyncio.create_task(_show(state, out, live, args.interval, stop))
        deadline = args.duration if args.duration > 0 else None
        await wait_set(stop, deadline)
        stop.set()
        # Stop in order: traffic, then the worker drains and commits, then the reader
        # catches the last results, then the broker goes.
        await asyncio.gather(traffic, view, return_exceptions=True)
        await producer.stop()
        worker.request_stop()
        worker_code = await worker_task
        await asyncio.sleep(0.5)
        reader_stop.set()
        await asyncio.gather(reader, return_exceptions=True)
        out.line()
        out.line(f"demo stopped after {state.elapsed():.0f}s: {sum(state.sent.values())} "
                 f"events sent, {state.evaluated} evaluations, alerts fired "
                 f"{state.alerts_fired}, resolved {state.alerts_resolved}; worker exit code "
                 f"{worker_code}")
        out.line()
        out.line(_REAL_SETUP)
    finally:
        await asyncio.to_thread(broker.stop)
    return worker_code


def main(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C or ``--duration``; return the exit code (0 when clean)."""
    for name in ("rate", "interval"):
        if getattr(args, name) <= 0:
            print(f"evalstream demo: --{name} must be positive", file=sys.stderr)
            return 2
    # Checked here, before the broker starts: a negative --duration ran until Ctrl-C, and
    # a --port out of range failed later as the "server.port" of a config nobody wrote.
    for name in ("duration", "spike_after", "spike_duration"):
        if getattr(args, name) < 0:
            print(f"evalstream demo: --{name.replace('_', '-')} must be 0 or more",
                  file=sys.stderr)
            return 2
    if not 0 <= args.port <= 65535:
        print("evalstream demo: --port must be 0 (any free port) to 65535", file=sys.stderr)
        return 2
    configure_logging(args.log_level, "console")
    live = sys.stdout.isatty() and not args.plain
    return asyncio.run(_demo(args, _Out(sys.stdout), live))
