"""scripts/setup refuses too old a Python up front and replaces a venv made with one.

The README's two commands start with scripts/setup. A first run with a python3 older than
3.11 (Ubuntu 22.04's is 3.10) used to create .venv with it, and pip then failed; running
again with PYTHON pointing at a newer interpreter reused that .venv and failed the same
way until it was removed by hand. These tests run the real script against stand-in
interpreters (shell scripts), so nothing is installed and no network is used.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: An interpreter that reports itself as Python 3.10: the version check exits 1.
OLD_PYTHON = """#!/bin/sh
if [ "$1" = --version ]; then echo "Python 3.10.13"; exit 0; fi
exit 1
"""

#: An interpreter new enough; ``-m venv DIR`` creates a venv whose python logs its calls
#: and fails them (so the script stops at its first pip call, before any network use).
NEW_PYTHON = """#!/bin/sh
if [ "$1" = -c ]; then exit 0; fi
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\\necho "$*" >> "%s"\\nexit 1\\n' "$CALLS" > "$3/bin/python"
  chmod +x "$3/bin/python"
  exit 0
fi
exit 1
"""


def _executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _checkout(tmp_path: Path) -> Path:
    """A minimal copy of the repository: the script and the pyproject it hashes."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "setup", repo / "scripts" / "setup")
    shutil.copy2(ROOT / "pyproject.toml", repo / "pyproject.toml")
    return repo


def _setup(repo: Path, python: Path, calls: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(python), "CALLS": str(calls)}
    return subprocess.run([str(repo / "scripts" / "setup"), "demo"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=30, check=False)


def test_too_old_python_is_refused_before_a_venv_exists(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    old = _executable(tmp_path / "bin" / "python3.10", OLD_PYTHON)
    proc = _setup(repo, old, tmp_path / "calls")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs Python >= 3.11" in proc.stderr
    assert "Python 3.10.13" in proc.stderr
    assert "PYTHON=" in proc.stderr  # says how to fix it
    assert not (repo / ".venv").exists()


def test_a_venv_of_too_old_a_python_is_replaced(tmp_path: Path) -> None:
    repo = _checkout(tmp_path)
    # What an earlier run with Python 3.10 left behind.
    _executable(repo / ".venv" / "bin" / "python", OLD_PYTHON)
    (repo / ".venv" / "left-by-the-old-run").touch()
    new = _executable(tmp_path / "bin" / "python3.12", NEW_PYTHON)
    calls = tmp_path / "calls"
    proc = _setup(repo, new, calls)
    # The stand-in venv's pip fails on purpose; what matters is which venv it ran in.
    assert proc.returncode != 0
    assert not (repo / ".venv" / "left-by-the-old-run").exists()
    assert calls.read_text(encoding="utf-8").startswith("-m pip install")
