"""Secrets and trace content through the whole worker, on the real broker.

The worker runs from a config with every kind of credential (judge API key, password in
``base_url``, header and query keys, Kafka SASL password), structlog at DEBUG rendering
JSON onto stderr, and traffic that provokes every failure path at once: a judge gateway
that echoes credentials in its 401s, a dropped connection, and malformed messages that go
to the dead-letter topic. Then every output is searched for every secret form and for the
content marker: the logs, the /metrics exposition, the results (values and headers) and
the dead letters' headers (their value is the original message, byte for byte, by design).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.worker import Worker
from evalstream.config import load_settings
from evalstream.events import dump_json
from evalstream.logging import configure_logging
from tests.integration.workerkit import Topics, config_dict, results, running, write_config
from tests.support.broker import Broker
from tests.support.kafka import create_topics, produce, read_all
from tests.support.llm_server import FakeLLM, serving

pytestmark = pytest.mark.integration

API_KEY = "sk-int-APIKEY-4f3e2d1c0b"
URL_PASSWORD = "pw-int-URLPASS-31337"
HEADER_KEY = "hdr-int-HEADERKEY-2718"
QUERY_KEY = "qry-int-QUERYKEY-1618"
SASL_PASSWORD = "sasl-int-PASSWORD-1414"
MARK = "CONTENT-MARK-INT-ZQX7"


def secret_forms() -> list[str]:
    forms = [API_KEY, URL_PASSWORD, HEADER_KEY, QUERY_KEY, SASL_PASSWORD,
             base64.b64encode(f"bob:{URL_PASSWORD}".encode()).decode()]
    return forms + [quote(v, safe="") for v in forms]


class Gateway(FakeLLM):
    """Answers normally, except when the prompt asks it to misbehave (markers below)."""

    async def _respond(self, writer: Any, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        text = json.dumps(body)
        for marker, seen in (("ECHO-PATH", path), ("ECHO-AUTH", headers.get("authorization")),
                             ("ECHO-APIKEY", headers.get("api-key")),
                             ("ECHO-HEADER", headers.get("x-goog-api-key"))):
            if marker in text:
                await self._send(writer, 401, {"error": {"message": f"rejected: {seen}"}})
                return True
        if "DROP-CONNECTION" in text:
            self.fail_next("reset")
        return await super()._respond(writer, path, body, headers)


def event(i: int, output: str) -> bytes:
    return dump_json({"event_id": f"e{i}", "trace_id": f"trace-{i}", "app": "bot",
                      "input": f"{MARK} question {i}", "output": f"{MARK} {output}",
                      "system_prompt": f"{MARK} You are a bot.",
                      "attributes": {"user": MARK}})


async def test_no_secret_or_content_escapes_the_worker(
        broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    topics = Topics.fresh("secworker")
    await topics.create(broker.bootstrap, partitions=1)
    otel = f"{topics.results}.otel"  # the OTel copy of results, on: scanned as well
    await create_topics(broker.bootstrap, [otel])
    monkeypatch.setenv("SEC_INT_KEY", API_KEY)
    monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__HEADERS",
                       json.dumps({"X-Goog-Api-Key": HEADER_KEY}))
    monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__QUERY", json.dumps({"key": QUERY_KEY}))
    configure_logging("DEBUG", "json")
    outputs = ["Sure, here it is.", "I can't help with that.", "ECHO-PATH", "ECHO-AUTH",
               "ECHO-APIKEY", "ECHO-HEADER", "DROP-CONNECTION"]
    malformed = [f"{MARK} not json".encode(),
                 dump_json({"output": {MARK: 1}, "event_id": MARK}),
                 b"\xff" + MARK.encode()]
    async with serving(Gateway(distribution={"no": 0.8, "yes": 0.2})) as server:
        # From the environment, like the headers: a password written in the file is refused.
        monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__BASE_URL", server.url.replace(
            "http://", f"http://bob:{URL_PASSWORD}@"))
        data = config_dict(
            broker.bootstrap, topics,
            logging={"level": "DEBUG"},
            judges={"llm": {"type": "openai", "base_url": server.url, "model": "m",
                            "api_key_env": "SEC_INT_KEY", "api_key_header": "api-key",
                            "max_retries": 0, "timeout_s": 5, "deadline_s": 10,
                            "circuit_failures": 100}},
            routes=[{"name": "r", "evaluators": [
                {"evaluator": "refusal", "judge": "llm", "reasons": "always"}]}])
        data["topics"]["otel_results"] = otel
        settings = load_settings(write_config(tmp_path / "worker.yaml", data))
        worker = Worker(settings, registry=CollectorRegistry())
        async with running(worker):
            await produce(broker.bootstrap, topics.inputs,
                          [event(i, o) for i, o in enumerate(outputs)] + malformed)
            published = await results(broker.bootstrap, topics.results, expect=len(outputs))
            dead = await read_all(broker.bootstrap, topics.dead_letter, expect=len(malformed))
            copies = await read_all(broker.bootstrap, otel, expect=len(outputs))
            async with httpx.AsyncClient(timeout=5) as client:
                metrics = (await client.get(
                    f"http://127.0.0.1:{worker.health.port}/metrics")).text
    logs = capsys.readouterr().err
    # The failure paths really ran, and the credentials really went to the server.
    statuses = sorted(r["status"] for r in published)
    assert statuses == ["error"] * 5 + ["ok"] * 2, published
    assert sum("***" in (r.get("error") or "") for r in published) == 4
    assert len(dead) == len(malformed)
    assert len(copies) == len(outputs)
    assert server.posts[0].headers["api-key"] == API_KEY
    assert server.posts[0].headers["x-goog-api-key"] == HEADER_KEY
    assert "dead_letter" in logs
    assert "judge_request_failed" in logs
    dead_headers = [{k: v.decode("utf-8", "replace") for k, v in r.headers}  # type: ignore[attr-defined]
                    for r in dead]
    exposed = {"logs": logs, "metrics": metrics,
               "results": json.dumps(published, default=repr),
               "dead-letter headers": json.dumps(dead_headers),
               "OTel results": "\n".join(r.value.decode("utf-8", "replace")  # type: ignore[attr-defined]
                                          for r in copies)}
    for where, text in exposed.items():
        leaked = [s for s in secret_forms() if s in text]
        assert not leaked, f"{where} leaks {leaked}"
    # The OTel copies carry an error's class, never its text (the masked credentials in the
    # results' errors), and no event content; a reason may quote the trace, but this
    # gateway's reasons are its fixed text.
    for where in ("logs", "metrics", "dead-letter headers", "OTel results"):
        assert MARK not in exposed[where], f"trace content in the {where}"


async def test_a_sasl_failure_at_start_up_does_not_print_the_password(
        broker: Broker, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Tansu speaks no SASL: the handshake fails, aiokafka logs it and the worker gives up."""
    topics = Topics.fresh("secsasl")
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", SASL_PASSWORD)
    configure_logging("DEBUG", "json")
    settings = load_settings(None, **config_dict(
        broker.bootstrap, topics, logging={"level": "DEBUG"},
        kafka={"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
               "sasl_username": "bob", "connect_timeout_s": 0}))
    assert settings.kafka.password() == SASL_PASSWORD
    code = await Worker(settings, registry=CollectorRegistry()).run()
    logs = capsys.readouterr().err
    assert code == 1
    assert "worker_start_failed" in logs
    assert "Sasl" in logs  # aiokafka's own error made it to the log...
    assert SASL_PASSWORD not in logs  # ...without the password
