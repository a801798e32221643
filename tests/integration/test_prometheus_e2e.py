"""A real Prometheus scrapes a real worker on the real broker: rules fire and resolve.

The worker runs in-process with the ``topic`` evaluator on the builtin judge; a feeder
produces flat_json events at ~12/s: on-topic (billing, shipping), then an off-topic spike,
then on-topic again. Prometheus (Debian's binary, temp config, 1 s scrape and rule
evaluation, the shipped rules with windows shortened) must fire EvalstreamOffTopicSpike and
the worker must publish a firing ``label_share`` alert on the alerts topic; after the
spike both resolve. A second test checks that every metric name the rules and the
dashboard use exists in the worker's /metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from evalstream.app.worker import Worker
from evalstream.events import dump_json, load_json
from tests.integration.workerkit import Topics, running, settings_for, wait_for
from tests.support.broker import Broker, free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "evalstream.json"

TOPICS = {"billing": "invoices, payments, refunds and charges on the customer's bill",
          "shipping": "delivery of parcels, tracking numbers and shipping times"}
ON_TOPIC = [
    ("Why was I charged twice on my invoice?",
     "I see two charges on your bill; I have refunded the duplicate payment to your card."),
    ("Where is my parcel?",
     "Your parcel is out for delivery; the tracking number shows it arrives tomorrow."),
]
OFF_TOPIC = [
    ("Can you recommend a pasta recipe?",
     "Sure! Boil spaghetti, fry garlic in olive oil, add chili and parmesan."),
    ("Who won the football match last night?",
     "The home team won 2-1 with a late goal in the second half."),
]
RATE_PER_S = 12


def shorten(rules: str) -> str:
    """The shipped rules with windows scaled for a one-minute test (5m -> 10s, 1h -> 60s)."""
    out = rules.replace("[5m]", "[10s]").replace("[1h]", "[60s]")
    out = out.replace("offset 5m", "offset 10s")
    out = re.sub(r"for: \d+m", "for: 0s", out)
    assert "[5m]" not in out
    assert "offset 5m" not in out
    return out


@contextlib.asynccontextmanager
async def prometheus(tmp: Path, target_port: int) -> AsyncIterator[str]:
    """Debian's prometheus on a free loopback port scraping ``target_port`` every second."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: install the Debian package `prometheus`")
    (tmp / "rules.yaml").write_text(shorten(RULES.read_text(encoding="utf-8")),
                                    encoding="utf-8")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yaml")],
        "scrape_configs": [{"job_name": "evalstream",
                            "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient(timeout=1) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{url}/-/ready")).status_code == 200:
                        break
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("prometheus did not start: " + (
                        tmp / "prometheus.log").read_text(errors="replace"))
                await asyncio.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


class Feeder:
    """Produces flat_json events at a steady rate; ``off_topic`` switches the content."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.off_topic = False
        self.sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for i in itertools.count():
                if stop.is_set():
                    return
                inp, out = (OFF_TOPIC if self.off_topic else ON_TOPIC)[i % 2]
                await producer.send_and_wait(self.topic, dump_json({
                    "event_id": f"e{i}", "trace_id": f"t{i}", "input": inp, "output": out,
                    "app": "support"}))
                self.sent += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1 / RATE_PER_S)
        finally:
            await producer.stop()


class AlertReader:
    """Collects every Alert event on the alerts topic as it arrives."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.alerts: list[dict[str, Any]] = []

    async def run(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    self.alerts.extend(load_json(r.value) for r in records)
        finally:
            await consumer.stop()

    def has(self, kind: str, state: str) -> bool:
        return any(a["kind"] == kind and a["state"] == state for a in self.alerts)


@contextlib.asynccontextmanager
async def background(*runners: Feeder | AlertReader) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(r.run(stop)) for r in runners]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)


async def firing(url: str, name: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(timeout=2) as client:
        body = (await client.get(f"{url}/api/v1/alerts")).json()
    return [a for a in body["data"]["alerts"]
            if a["labels"]["alertname"] == name and a["state"] == "firing"]


def worker_settings(broker: Broker, topics: Topics) -> Any:
    return settings_for(
        broker.bootstrap, topics,
        routes=[{"name": "support", "evaluators": [
            {"evaluator": "topic", "params": {"topics": TOPICS, "fail_topics": ["other"]}}]}],
        drift={"enabled": True, "windows_s": [10, 60], "bucket_s": 1, "min_samples": 10,
               "warmup_samples": 60, "min_detect_samples": 10, "arl0": 2000,
               "min_shift": 0.3, "label_min_shift": 0.3, "tick_s": 0.5},
    )


async def test_off_topic_spike_fires_and_resolves_in_prometheus_and_on_alerts_topic(
        broker: Broker, tmp_path: Path) -> None:
    topics = Topics.fresh("prom")
    await topics.create(broker.bootstrap, partitions=1)
    worker = Worker(worker_settings(broker, topics), registry=CollectorRegistry())
    feeder = Feeder(broker.bootstrap, topics.inputs)
    reader = AlertReader(broker.bootstrap, topics.alerts)
    # Context expressions are evaluated in order: the port is known once the worker runs.
    async with running(worker), background(feeder, reader), \
            prometheus(tmp_path, worker.health.port) as url:
        # Stable period: long enough for the worker's warm-up (60 results) and for
        # Prometheus to hold a baseline (>= 100 evaluations in the shortened 1h window).
        await wait_for(lambda: feeder.sent >= 25 * RATE_PER_S, 60, "a stable period")
        assert await firing(url, "EvalstreamOffTopicSpike") == []
        assert await firing(url, "EvalstreamPassRateDrop") == []
        assert not reader.alerts, reader.alerts

        feeder.off_topic = True
        await wait_for(lambda: firing(url, "EvalstreamOffTopicSpike"), 30,
                       "EvalstreamOffTopicSpike firing in Prometheus")
        await wait_for(lambda: reader.has("label_share", "firing"), 15,
                       "a firing label_share alert on the alerts topic")
        # The worker's own detector is visible to Prometheus through its gauge as well.
        await wait_for(lambda: firing(url, "EvalstreamDriftDetected"), 15,
                       "EvalstreamDriftDetected firing from the worker's gauge")
        [prom_alert] = await firing(url, "EvalstreamOffTopicSpike")
        assert prom_alert["labels"]["route"] == "support"
        alert = next(a for a in reader.alerts if a["kind"] == "label_share")
        assert (alert["route"], alert["evaluator"]) == ("support", "topic")
        assert alert["baseline"] < 0.1
        assert alert["n"] >= 10
        assert alert["statistic"] >= alert["threshold"]

        feeder.off_topic = False
        async def spike_resolved() -> bool:
            return not await firing(url, "EvalstreamOffTopicSpike")

        await wait_for(spike_resolved, 30, "EvalstreamOffTopicSpike to resolve")
        await wait_for(lambda: reader.has("label_share", "resolved"), 30,
                       "a resolved label_share alert on the alerts topic")
        resolved = next(a for a in reader.alerts
                        if a["kind"] == "label_share" and a["state"] == "resolved")
        assert resolved["alert_id"] == alert["alert_id"]

        # Every dashboard query is valid PromQL against this Prometheus.
        async with httpx.AsyncClient(timeout=5) as client:
            for expr in dashboard_exprs():
                query = (expr.replace("$__rate_interval", "10s")
                         .replace("$route", ".*").replace("$evaluator", ".*")
                         .replace("$window", ".*"))
                resp = await client.get(f"{url}/api/v1/query", params={"query": query})
                assert resp.json()["status"] == "success", (expr, resp.text)


def dashboard_exprs() -> list[str]:
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return [t["expr"] for p in board["panels"] for t in (p.get("targets") or [])]


def used_metric_names() -> set[str]:
    """Raw metric names in the rules' and dashboard's PromQL (recorded series excluded)."""
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    exprs = [r["expr"] for g in doc["groups"] for r in g["rules"]] + dashboard_exprs()
    names: set[str] = set()
    for expr in exprs:
        # Drop string literals ("...") so label values are not read as names.
        bare = re.sub(r'"[^"]*"', '""', expr)
        names.update(n for n in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)
                     if n.startswith("evalstream_"))
    return names


def exposed_sample_names(text: str) -> set[str]:
    """Every sample name the exposition can produce, including for families still empty."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"],
                "summary": ["_sum", "_count", ""], "info": ["_info"], "gauge": [""]}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
        names.update(family.name + sfx for sfx in suffixes.get(family.type, [""]))
    return names


async def test_every_metric_in_rules_and_dashboard_is_exported(broker: Broker) -> None:
    topics = Topics.fresh("names")
    await topics.create(broker.bootstrap, partitions=1)
    worker = Worker(worker_settings(broker, topics), registry=CollectorRegistry())
    async with running(worker), httpx.AsyncClient(timeout=5) as client:
        text = (await client.get(f"http://127.0.0.1:{worker.health.port}/metrics")).text
    exposed = exposed_sample_names(text)
    used = used_metric_names()
    assert len(used) >= 15
    missing = sorted(used - exposed)
    assert not missing, f"used by rules/dashboard but not exported: {missing}"
