"""How early a SIGTERM stops ``python -m evalstream run`` cleanly (exit 0) instead of killing
it with Python's default action (exit 143).

For each delay t the worker is spawned (a valid configuration whose broker port is closed,
so it stays in its connection retries), sent SIGTERM t seconds after the spawn, and its
exit code recorded. The window is the largest t that still ends in 143: until the stop
handling is installed, a SIGTERM kills the process. Bare interpreter start-up
(``python -c pass``) is timed in the same run as the baseline the window cannot go below.

Run: ``PYTHONPATH=src python bench/early_sigterm.py [--repeat 5] [--entry module|script]``
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

DELAYS = [round(0.01 * i, 2) for i in range(1, 41)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(directory: Path) -> Path:
    path = directory / "worker.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": f"127.0.0.1:{_free_port()}", "group_id": "bench",
                  "connect_timeout_s": 60},
        "inputs": [{"topic": "traces"}],
        "server": {"host": "127.0.0.1", "port": 0},
        "routes": [{"name": "r", "evaluators": [{"evaluator": "refusal"}]}],
    }), encoding="utf-8")
    return path


def _once(command: list[str], delay: float, env: dict[str, str]) -> int:
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(delay)
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def _startup_s(repeat: int) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - began)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--entry", choices=["module", "script"], default="module")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = str(_config(Path(tmp)))
        if args.entry == "module":
            command = [sys.executable, "-m", "evalstream", "run", "--config", config]
        else:
            command = [str(Path(sys.executable).with_name("evalstream")), "run", "--config",
                       config]
        env = dict(os.environ)
        print(f"interpreter start-up (python -c pass, median of {args.repeat}): "
              f"{_startup_s(args.repeat) * 1000:.0f} ms")
        print(f"entry: {' '.join(command[:3 if args.entry == 'module' else 1])} run")
        print("delay_s  exit0  exit143  other")
        window = 0.0
        for delay in DELAYS:
            codes = Counter(_once(command, delay, env) for _ in range(args.repeat))
            killed = codes.pop(-signal.SIGTERM, 0) + codes.pop(143, 0)
            clean = codes.pop(0, 0)
            print(f"{delay:7.2f}  {clean:5d}  {killed:7d}  {dict(codes) or ''}")
            if killed:
                window = delay
        print(f"window (largest delay with a kill): {window * 1000:.0f} ms")


if __name__ == "__main__":
    main()
