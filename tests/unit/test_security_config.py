"""Judge API keys as they arrive in real deployments: with stray whitespace, or worse.

A key exposed as an environment variable from a Kubernetes Secret made with
``--from-file`` often ends with the file's newline. httpx refuses such a header value, so
every judge request used to fail as a retryable transport error until its deadline, with
nothing saying why. A key with a line break inside, a control or a non-ASCII character is
refused when the configuration is loaded, naming where it came from and never echoing it.
So is a ``base_url`` httpx cannot use (a bad or out-of-range port, no host), with the
credentials it may hold masked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from evalstream.cli import EXIT_CONFIG, main
from evalstream.config import load_settings
from evalstream.errors import ConfigError
from evalstream.judges.base import JudgeRequest
from evalstream.judges.registry import build_judges, close_judges
from evalstream.metrics import Metrics
from tests.support.llm_server import llm_server

KEY = "sk-sec-CONFIG-0123456789"


@pytest.fixture(autouse=True)
def _plain_logging() -> None:
    structlog.reset_defaults()


@pytest.mark.parametrize("stored", [f"{KEY}\n", f"  {KEY}\r\n", f"\t{KEY} "])
async def test_surrounding_whitespace_in_an_env_key_is_stripped(
        stored: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEC_CFG_KEY", stored)
    async with llm_server() as server:
        settings = load_settings(judges={"llm": {
            "type": "openai", "base_url": server.url, "model": "m",
            "api_key_env": "SEC_CFG_KEY", "max_retries": 0}})
        judges = build_judges(settings.judges, Metrics())
        try:
            await judges["llm"].judge(JudgeRequest(task="t", instructions="i", question="q",
                                                   data=(("output", "x"),)))
        finally:
            await close_judges(judges)
    (post,) = server.posts
    assert post.headers["authorization"] == f"Bearer {KEY}"


BAD_KEYS = {"header injection": f"{KEY}\r\nX-Injected: 1", "line break": f"{KEY}\nsecond",
            "non-ASCII": f"{KEY}-\u043a\u043b\u044e\u0447", "control": f"{KEY}\x1b[0m"}


@pytest.mark.parametrize("source", ["env", "file", "direct"])
@pytest.mark.parametrize("kind", sorted(BAD_KEYS))
def test_a_key_no_header_can_carry_is_refused_at_load_without_echoing_it(
        kind: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = BAD_KEYS[kind]
    config = tmp_path / "c.yaml"
    judge = "judges:\n  llm:\n    type: openai\n    base_url: http://127.0.0.1:9/v1\n    model: m\n"
    if source == "env":
        monkeypatch.setenv("SEC_CFG_KEY", bad)
        judge += "    api_key_env: SEC_CFG_KEY\n"
    elif source == "file":
        (tmp_path / "key").write_text(bad, encoding="utf-8")
        judge += f"    api_key_file: {tmp_path / 'key'}\n"
    else:
        monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__API_KEY", bad)
    config.write_text(judge, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"judges\.llm\.api_key.*cannot carry") as info:
        load_settings(config)
    assert KEY not in str(info.value)
    assert main(["check-config", str(config)]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert "judges.llm.api_key" in captured.err
    assert KEY not in captured.out + captured.err


@pytest.mark.parametrize(("base_url", "problem"), [
    (f"http://bob:{KEY}@host:abc/v1", "Invalid port"),
    (f"http://bob:{KEY}@[::1/v1", "Invalid port"),
    (f"http://bob:{KEY}\x01@host/v1", "non-printable"),
    (f"http://bob:{KEY}@host:99999/v1", "out of range"),
    ("http:///v1", "no host"),
])
@pytest.mark.parametrize("command", ["check-config", "run"])
def test_an_unusable_base_url_is_a_config_error_that_hides_its_credentials(
        base_url: str, problem: str, command: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """It used to escape as an httpx.InvalidURL traceback (exit 1) when the judge was built,
    or, for an out-of-range port or no host, fail every request at run time. The URL comes
    from the environment: a password written in the file is refused before this check."""
    monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__BASE_URL", base_url)
    config = tmp_path / "c.yaml"
    config.write_text(
        "kafka: {bootstrap_servers: '127.0.0.1:9', connect_timeout_s: 0}\n"
        "judges:\n  llm: {type: openai, base_url: 'http://placeholder/v1', model: m}\n"
        "routes: [{name: r, evaluators: [{evaluator: refusal, judge: llm}]}]\n",
        encoding="utf-8")
    argv = [command, str(config)] if command == "check-config" else ["run", "-c", str(config)]
    assert main(argv) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert "judges.llm" in captured.err
    assert problem in captured.err
    assert KEY not in captured.out + captured.err


@pytest.mark.parametrize("headers", [{"X-Goog-Api-Key": f"{KEY}\n"},
                                     {"X-Goog-Api-Key": f"{KEY}\u00e9"},
                                     {"X-Bad Name": "v"}, {"X-Key\r\nX-Injected": "1"}])
def test_headers_no_request_can_carry_are_refused_without_echoing_their_values(
        headers: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A line break used to fail every request as a retried transport error; a non-ASCII
    value crashed start-up with a UnicodeEncodeError."""
    monkeypatch.setenv("EVALSTREAM_JUDGES__LLM__HEADERS", json.dumps(headers))
    config = tmp_path / "c.yaml"
    config.write_text("judges:\n  llm: {type: openai, base_url: 'http://127.0.0.1:9/v1', "
                      "model: m}\n", encoding="utf-8")
    assert main(["check-config", str(config)]) == EXIT_CONFIG
    captured = capsys.readouterr()
    assert "judges.llm" in captured.err
    assert "printable ASCII" in captured.err
    assert KEY not in captured.out + captured.err
