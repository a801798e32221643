"""CPU per evaluated event of this tree's worker against a baseline revision, in one run.

What an evaluated event costs (decode, plan, the refusal evaluator with the builtin judge,
result validation, publish and broker ack, observers, metrics) is measured the way
``bench/throughput.py`` measures its 100% run: a real ``python -m evalstream run`` process
at 100% sampling, CPU seconds from /proc between the first and the last progress sample,
divided by the results published in between. Here the same topic (on one broker started
here) is consumed alternately by the worker of this tree and by the worker of ``--baseline``
(a git revision, extracted with ``git archive``), each in a fresh consumer group, so the
ratio is taken on the same machine at the same time. On a shared machine single runs vary by
10% or more: the best of ``--rounds`` runs per side is compared.

Run: ``python bench/evaluate_path.py --baseline HEAD~3 [--events 30000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from throughput import REPO, TOPIC, broker, cpu_seconds, free_port, produce, scrape

_COUNTER = "evalstream_results_published_total"


def run_worker(bootstrap: str, n: int, src: Path, workdir: Path, group: str) -> float:
    """Run the worker of ``src`` at 100% until it published ``n`` results: CPU-us per result."""
    port = free_port()
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "group_id": group},
        "inputs": [{"topic": TOPIC}],
        "topics": {"results": f"{group}.results", "dead_letter": f"{group}.dlq",
                   "alerts": f"{group}.alerts"},
        "sampling": {"rate": 1.0},
        "routes": [{"name": "support", "evaluators": [{"evaluator": "refusal"}]}],
        "server": {"host": "127.0.0.1", "port": port},
        "logging": {"level": "WARNING"},
    }
    path = workdir / f"{group}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(src)}
    with (workdir / f"{group}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "evalstream", "run", "--config",
                                 str(path)], env=env, stdout=subprocess.DEVNULL, stderr=log)
    samples: list[tuple[float, float]] = []
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}; see {log.name}")
            try:
                value = scrape(port).get(_COUNTER, 0.0)
            except httpx.HTTPError:
                value = 0.0
            if value > 0:
                samples.append((value, cpu_seconds(proc.pid)))
            if value >= n:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    (v0, c0), (v1, c1) = samples[0], samples[-1]
    return (c1 - c0) / (v1 - v0) * 1e6


def extract(revision: str, into: Path) -> Path:
    """``src/`` of ``revision`` under ``into``; returns the repository-like root."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "src"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


async def main_async(args: argparse.Namespace) -> None:
    n = args.events
    with tempfile.TemporaryDirectory() as tmp, broker(Path(tmp)) as bootstrap:
        workdir = Path(tmp)
        (workdir / "baseline").mkdir()
        baseline_root = extract(args.baseline, workdir / "baseline")
        await produce(bootstrap, n)
        trees = {"baseline": baseline_root, "this tree": REPO}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        group = 0
        for _ in range(args.rounds):
            for name, root in trees.items():
                group += 1
                us = await asyncio.to_thread(run_worker, bootstrap, n, root / "src", workdir,
                                             f"g{group}")
                cpu[name].append(us)
                print(f"  {name:<10} {us:7.1f} CPU-us per evaluated event", flush=True)
        base, ours = min(cpu["baseline"]), min(cpu["this tree"])
        print(f"best of {args.rounds}: baseline ({args.baseline}) {base:.1f} us, this tree "
              f"{ours:.1f} us per evaluated event; ratio this/baseline {ours / base:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare against")
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
