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

``--candidate`` measures a second revision in place of the work tree (so the tree can be
edited while a comparison runs). ``--otel`` sets ``topics.otel_results`` on both sides, so
each result is also written as its OpenTelemetry copy (e.g. to compare ways of sending it).
``--max-in-flight`` sets ``worker.max_in_flight`` on both sides: with few evaluations in
flight, time each one waits (e.g. for acks) limits the rate where CPU did not.

Evaluated events/s (between the same samples) are printed too, best of the rounds per side:
a change that adds waiting rather than CPU (one more ack round trip per result) shows there,
not in CPU per event. Wall-clock rates on a shared machine are noisier than CPU time.

Run: ``python bench/evaluate_path.py --baseline HEAD~3 [--candidate HEAD] [--events 30000]
[--rounds 3] [--otel] [--max-in-flight 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
from pathlib import Path

import throughput
from throughput import REPO, broker, produce

_COUNTER = "evalstream_results_published_total"


def run_worker(bootstrap: str, n: int, src: Path, workdir: Path, group: str,
               args: argparse.Namespace) -> tuple[float, float]:
    """Run the worker of ``src`` at 100% until it published ``n`` results: (CPU-us per
    result, results per second)."""
    figures = throughput.run_worker(bootstrap, n, 1.0, workdir, group, _COUNTER, n, src=src,
                                    otel=args.otel, max_in_flight=args.max_in_flight)
    return figures["cpu_per_event"] * 1e6, figures["rate"]


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
        candidate_root = REPO
        if args.candidate:
            (workdir / "candidate").mkdir()
            candidate_root = extract(args.candidate, workdir / "candidate")
        await produce(bootstrap, n)
        trees = {"baseline": baseline_root, "this tree": candidate_root}
        cpu: dict[str, list[float]] = {name: [] for name in trees}
        rates: dict[str, list[float]] = {name: [] for name in trees}
        group = 0
        for _ in range(args.rounds):
            for name, root in trees.items():
                group += 1
                us, rate = await asyncio.to_thread(run_worker, bootstrap, n, root / "src",
                                                   workdir, f"g{group}", args)
                cpu[name].append(us)
                rates[name].append(rate)
                print(f"  {name:<10} {us:7.1f} CPU-us per evaluated event, "
                      f"{rate:8,.0f} evaluated events/s", flush=True)
        base, ours = min(cpu["baseline"]), min(cpu["this tree"])
        base_rate, our_rate = max(rates["baseline"]), max(rates["this tree"])
        this = args.candidate or "work tree"
        setup = " (topics.otel_results set)" if args.otel else ""
        if args.max_in_flight:
            setup += f" (max_in_flight {args.max_in_flight})"
        print(f"best of {args.rounds}{setup}: baseline ({args.baseline}) {base:.1f} us, this "
              f"tree ({this}) {ours:.1f} us per evaluated event; ratio this/baseline "
              f"{ours / base:.3f}")
        print(f"best of {args.rounds}{setup}: baseline {base_rate:,.0f}, this tree "
              f"{our_rate:,.0f} evaluated events/s; ratio this/baseline "
              f"{our_rate / base_rate:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare against")
    parser.add_argument("--candidate", default="",
                        help="git revision measured as 'this tree' (default: the work tree)")
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--otel", action="store_true",
                        help="set topics.otel_results: each result also written as OTel event")
    parser.add_argument("--max-in-flight", type=int, default=0,
                        help="worker.max_in_flight on both sides (default: the worker's)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
