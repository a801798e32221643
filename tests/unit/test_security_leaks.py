"""Adversarial review of secret leakage from the LLM judge, through the pipeline.

A judge holds credentials in four places (``masked_dump`` hides them all): the API key,
the password in ``base_url`` (httpx sends it as HTTP Basic), and header and query values
(gateways take keys there: ``X-Goog-Api-Key``, ``?key=``). Servers and gateways echo what
they received in error messages (the request path with its query, the Authorization
header), and those messages reach results, exceptions and logs. Each test runs the real
pipeline against a local server on a real socket that echoes everything, with structlog
rendering JSON at DEBUG onto stderr, and looks for every form of every secret in the
result, the exception, the log output and the metrics exposition.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from prometheus_client import generate_latest

from evalstream.app.pipeline import Pipeline
from evalstream.config import load_settings, masked_dump
from evalstream.events import TraceEvent, dump_json
from evalstream.judges.openai_send import endpoint_host
from evalstream.judges.registry import build_judges, close_judges
from evalstream.logging import configure_logging
from evalstream.metrics import Metrics
from tests.support.llm_server import FakeLLM, serving

API_KEY = "sk-sec-APIKEY-0123456789abcdef"
URL_PASSWORD = "pw-URLPASS/+=9876"
HEADER_KEY = "hdr-HEADERKEY-55555"
QUERY_KEY = "qry-QUERYKEY-77777 x"
USER_KEY = "usr-USERKEY-31415926"
MARK = "CONTENT-MARK-ZQX7"


def secret_forms() -> list[str]:
    """Every form a secret may be echoed in: raw, URL-encoded, as the Basic token."""
    forms = [API_KEY, URL_PASSWORD, HEADER_KEY, QUERY_KEY, USER_KEY,
             base64.b64encode(f"bob:{URL_PASSWORD}".encode()).decode(),
             base64.b64encode(f"{USER_KEY}:".encode()).decode()]
    return forms + [quote(v, safe="") for v in forms] + [quote(QUERY_KEY).replace("%20", "+")]


class EchoGateway(FakeLLM):
    """A gateway that answers ``status`` with an error message echoing part of the request
    it received (the request line, or one header), as some proxies and mock servers do."""

    status: int = 401
    echo: str = "path"

    async def _respond(self, writer: Any, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        seen = path if self.echo == "path" else headers.get(self.echo, "")
        await self._send(writer, self.status, {"error": {"message": f"rejected: {seen}"}})
        return True


def judge_config(url: str, *, userinfo: str = "bob:password", **extra: Any
                 ) -> dict[str, Any]:
    if userinfo == "bob:password":
        url = url.replace("http://", f"http://bob:{quote(URL_PASSWORD, safe='')}@")
    elif userinfo == "key as user":
        url = url.replace("http://", f"http://{USER_KEY}@")
    return {"type": "openai", "base_url": url, "model": "m", "api_key_env": "SEC_TEST_KEY",
            "headers": {"X-Goog-Api-Key": HEADER_KEY}, "query": {"key": QUERY_KEY},
            "max_retries": 0, "timeout_s": 2.0, "deadline_s": 5.0, **extra}


#: What the gateway echoes -> (header it echoes, judge settings).
ECHOES: dict[str, tuple[str, dict[str, Any]]] = {
    "bearer key": ("authorization", {"userinfo": ""}),
    # The URL's user info becomes a Basic Authorization header (the key goes elsewhere).
    "basic credentials": ("authorization", {"api_key_header": "api-key"}),
    "key as the URL's user name": ("authorization", {"api_key_header": "api-key",
                                                     "userinfo": "key as user"}),
    "header key": ("x-goog-api-key", {}),
    "query key in the path": ("path", {}),
}


@pytest.mark.parametrize("status", [401, 404, 500])
@pytest.mark.parametrize("echoed", sorted(ECHOES))
async def test_echoed_credentials_are_scrubbed_everywhere(
        status: int, echoed: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SEC_TEST_KEY", API_KEY)
    configure_logging("DEBUG", "json")
    server = EchoGateway()
    server.status = status
    server.echo, options = ECHOES[echoed]
    metrics = Metrics()
    async with serving(server):
        settings = load_settings(
            judges={"llm": judge_config(server.url, **options)},
            routes=[{"name": "r", "evaluators": [
                {"evaluator": "refusal", "judge": "llm", "reasons": "always"}]}])
        judges = build_judges(settings.judges, metrics)
        pipeline = Pipeline(settings, judges, metrics)
        try:
            event = TraceEvent(event_id="e1", trace_id="t1", input=f"{MARK} in",
                               output=f"{MARK} out", system_prompt=f"{MARK} sys")
            results = await pipeline.evaluate(event, topic="llm.traces")
        finally:
            await pipeline.aclose()
            await close_judges(judges)
    (post,) = server.posts
    # The credentials did go to the server, so the checks below mean something.
    assert post.headers["x-goog-api-key"] == HEADER_KEY
    assert quote(QUERY_KEY).replace("%20", "+") in post.path
    (result,) = results
    assert result.status == "error"
    assert f"HTTP {status}" in (result.error or "")
    assert "***" in (result.error or ""), "the server's echo should be in the error, scrubbed"
    logs = capsys.readouterr().err
    assert "judge_request_failed" in logs
    exposed = {"result": dump_json(result).decode(), "logs": logs,
               "metrics": generate_latest(metrics.registry).decode(),
               "check-config": json.dumps(masked_dump(settings))}
    for where, text in exposed.items():
        leaked = [s for s in secret_forms() if s in text]
        assert not leaked, f"{where} leaks {leaked}"
    assert MARK not in logs
    assert MARK not in exposed["metrics"]


async def test_transport_failures_name_only_the_host(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Connection refused, dropped connections and timeouts: httpx's exceptions carry the
    URL (with its credentials and query); the judge's errors name only the host and port."""
    monkeypatch.setenv("SEC_TEST_KEY", API_KEY)
    configure_logging("DEBUG", "json")
    errors: list[str] = []
    async with serving(FakeLLM(timeout_delay_s=3.0)) as server:
        for fault in ("reset", "timeout", "refused"):
            server.fail_next(fault) if fault != "refused" else None
            url = server.url if fault != "refused" else "http://127.0.0.1:9/v1"
            settings = load_settings(judges={"llm": judge_config(url, timeout_s=0.5,
                                                                 deadline_s=2.0)},
                                     routes=[{"name": "r", "evaluators": [
                                         {"evaluator": "refusal", "judge": "llm"}]}])
            metrics = Metrics()
            judges = build_judges(settings.judges, metrics)
            pipeline = Pipeline(settings, judges, metrics)
            try:
                (result,) = await pipeline.evaluate(
                    TraceEvent(event_id=f"e-{fault}", output=f"{MARK} out"), topic="t")
            finally:
                await pipeline.aclose()
                await close_judges(judges)
            assert result.status == "error"
            assert "127.0.0.1" in (result.error or "")
            errors.append(dump_json(result).decode())
    logs = capsys.readouterr().err
    for text in (*errors, logs):
        assert not [s for s in secret_forms() if s in text]
        assert "bob:" not in text
    assert MARK not in logs
    # ...and the log line says which failure it was (it said only status=None).
    # With the port (it said only the host): which of the local endpoints refused.
    assert "ConnectError talking to 127.0.0.1:9" in logs
    assert f"Timeout after 0.5s talking to 127.0.0.1:{httpx.URL(server.url).port}" in logs
    assert endpoint_host("https://bob:pw@h.example:8443/v1?k=v") == "h.example:8443"
    assert endpoint_host("https://h.example:443/v1") == "h.example"  # default port
    assert endpoint_host("http://[::1]:8000/v1") == "[::1]:8000"
    # httpx itself would have said more: prove the URL really carried the secrets.
    request = httpx.Client().build_request(
        "POST", judge_config("http://127.0.0.1:9/v1")["base_url"], params={"key": QUERY_KEY})
    assert quote(QUERY_KEY).replace("%20", "+") in str(request.url)
