"""The command line: config errors exit 2 naming the field, before anything connects."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evalstream.cli import EXIT_CONFIG, main
from evalstream.evaluators import registry

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "evalstream.example.yaml"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket posing as the broker: a worker that started would connect to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.setblocking(False)
        yield s


def bootstrap(s: socket.socket) -> str:
    return f"127.0.0.1:{s.getsockname()[1]}"


def nobody_connected(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


BAD = {
    "unknown key": ("kafka:\n  bootstrap_servers: {bs}\n  bootstrp: x\n", "kafka.bootstrp"),
    "wrong type": ("kafka:\n  bootstrap_servers: {bs}\nworker:\n  max_in_flight: many\n",
                   "worker.max_in_flight"),
    "missing topic": ("kafka:\n  bootstrap_servers: {bs}\ninputs:\n  - format: flat_json\n",
                      "inputs.0.topic"),
    "unparseable yaml": ("kafka:\n  bootstrap_servers: {bs}\nroutes: [\n  - name: x\n",
                         "not valid YAML at line"),
    "unknown evaluator": ("kafka:\n  bootstrap_servers: {bs}\nroutes:\n  - name: r1\n"
                          "    evaluators:\n      - evaluator: nonesuch\n",
                          "routes[0] (r1) evaluators[0].evaluator"),
    "bad evaluator params": ("kafka:\n  bootstrap_servers: {bs}\nroutes:\n  - name: r1\n"
                             "    evaluators:\n      - evaluator: refusal\n"
                             "        params: {{threshold: 7}}\n", "params.threshold"),
    "unknown mapping field": ("kafka:\n  bootstrap_servers: {bs}\ninputs:\n  - topic: t\n"
                              "    mapping: {{answer: response.text}}\n", "mapping"),
    "unknown judge": ("kafka:\n  bootstrap_servers: {bs}\nroutes:\n  - name: r1\n"
                      "    evaluators:\n      - {{evaluator: refusal, judge: gpt}}\n",
                      "judge 'gpt' is not defined"),
    # Used to pass check-config and then crash `run` with exit 1 when the clients were built.
    "missing password file": ("kafka:\n  bootstrap_servers: {bs}\n"
                              "  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n"
                              "  sasl_username: u\n  sasl_password_file: /nonexistent/pw\n",
                              "kafka.sasl_password_file"),
    "missing ca file": ("kafka:\n  bootstrap_servers: {bs}\n  security_protocol: SSL\n"
                        "  ssl_cafile: /nonexistent/ca.pem\n", "kafka.ssl_cafile"),
    "sasl without username": ("kafka:\n  bootstrap_servers: {bs}\n"
                              "  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n",
                              "sasl_username is required"),
    "unknown kafka extra": ("kafka:\n  bootstrap_servers: {bs}\n  extra: {{bogus_option: 1}}\n",
                            "kafka.extra"),
    # Backfill start times: a naive one is ambiguous, a future one would re-score nothing.
    "naive start_from": ("kafka:\n  bootstrap_servers: {bs}\n"
                         "  start_from: 2026-11-29T00:00:00\n",
                         "kafka.start_from: Input should have timezone info"),
    "future start_from": ("kafka:\n  bootstrap_servers: {bs}\n"
                          "  start_from: 2999-01-01T00:00:00Z\n",
                          "kafka.start_from: Value error, 2999-01-01T00:00:00+00:00 is in the "
                          "future"),
    # A topic no input consumes: the route would silently never match.
    "route topic not consumed": ("kafka:\n  bootstrap_servers: {bs}\n"
                                 "inputs: [{{topic: llm.traces}}]\n"
                                 "routes:\n  - name: a\n    match: {{topic: [llm.trace]}}\n"
                                 "    evaluators: [{{evaluator: refusal}}]\n",
                                 "routes[0] (a).match.topic: ['llm.trace'] is not an input topic"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["run", "check-config"])
def test_bad_config_exits_2_naming_the_field(case: str, command: str, tmp_path: Path,
                                             listener: socket.socket,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    text, needle = BAD[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text.format(bs=bootstrap(listener)), encoding="utf-8")
    argv = ["run", "--config", str(path)] if command == "run" else ["check-config", str(path)]
    assert main(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "configuration error" in err
    assert needle in err, err
    assert "worker_starting" not in err
    assert nobody_connected(listener)


def test_bad_config_in_a_real_process(tmp_path: Path, listener: socket.socket) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"kafka:\n  bootstrap_servers: {bootstrap(listener)}\n"
                    "worker:\n  max_in_flight: -3\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "evalstream", "run", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == EXIT_CONFIG
    assert "worker.max_in_flight" in proc.stderr
    assert nobody_connected(listener)


def test_missing_file_is_a_config_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(tmp_path / "absent.yaml")]) == EXIT_CONFIG
    assert "cannot read config file" in capsys.readouterr().err


def test_check_config_prints_the_effective_config_with_secrets_masked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", "hunter2-secret")
    monkeypatch.setenv("EVALSTREAM_SAMPLING__RATE", "0.25")
    assert main(["check-config", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "hunter2-secret" not in out
    effective = yaml.safe_load(out)
    assert effective["kafka"]["sasl_password"] == "**********"
    assert effective["sampling"]["rate"] == 0.25  # the environment wins over the file
    assert effective["inputs"][0]["mapping"]["output"] == "response.text"
    assert [r["name"] for r in effective["routes"]] == ["support", "default"]


def test_list_evaluators_includes_refusal(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list-evaluators"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("refusal ") for line in lines)
    # Each with its version, the one its results carry in evaluator_version.
    (refusal,) = [line.split() for line in lines if line.startswith("refusal ")]
    assert refusal[1] == f"v{registry.get('refusal').version}"


@pytest.mark.parametrize(("command", "option"), [("eval", "--input"), ("demo", "--duration")])
def test_eval_and_demo_delegate_with_their_own_options(
        command: str, option: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: evalstream {command}")
    assert option in out


def test_module_import_stays_lazy() -> None:
    code = ("import sys, evalstream.cli; "
            "print(any(m.startswith(('evalstream.app', 'aiokafka')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"


def test_ctrl_c_in_a_command_other_than_run_exits_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # E.g. while the demo is still importing: Python's default was a traceback.
    import evalstream.cli as cli

    def interrupted(*_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_delegate", interrupted)
    assert main(["demo"]) == 130
    assert capsys.readouterr().err == "evalstream: interrupted\n"


@pytest.mark.parametrize(("option", "value"), [
    ("--rate", "0"), ("--interval", "-1"), ("--duration", "-5"), ("--port", "70000"),
    ("--port", "-1"), ("--spike-duration", "-1")])
def test_demo_refuses_bad_options_before_starting_anything(
        option: str, value: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # A negative --duration ran until Ctrl-C; --port 70000 started the broker, then said
    # "configuration error: invalid configuration in defaults: server.port".
    from evalstream.app import demo

    async def started(*_: object) -> int:
        raise AssertionError("the demo started")

    monkeypatch.setattr(demo, "_demo", started)
    assert main(["demo", option, value]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err.startswith(f"evalstream demo: {option} must be ")
