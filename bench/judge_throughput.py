"""LLM-judge throughput against a server that answers after 200 ms, and memory flatness.

The fake OpenAI-compatible server (``tests/support/llm_server.py``) runs in its own process
so its CPU does not count against the client. With ``max_concurrency`` C and a latency of
L seconds, Little's law caps throughput at C / L (64 / 0.2 s = 320 evaluations/s); the
figure to look at is the achieved fraction of that cap, measured for C = 8 and C = 64 in
the same run. Every request is distinct, so the (bounded) cache serves none of them; RSS is
printed before the run and after each round, and should level off once the cache is full.

Run: ``python bench/judge_throughput.py [--rounds 4] [--per-round 2000]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from evalstream.config import OpenAIJudgeConfig
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
LATENCY_S = 0.2


def rss_mb() -> float:
    """Current resident set size of this process in MiB (Linux /proc)."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def start_server() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.llm_server", "--delay", str(LATENCY_S)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, port


def request(i: int) -> JudgeRequest:
    return JudgeRequest(
        task="refusal", instructions="Decide whether the assistant's answer refuses.",
        question="Does the answer refuse or decline the request?",
        data=(("input", f"question number {i}"), ("output", f"Here is answer number {i}.")))


async def run_round(judge: OpenAIJudge, start: int, n: int) -> float:
    """Evaluate ``n`` distinct requests as fast as the judge allows; evaluations/s."""
    t0 = time.perf_counter()
    results = await asyncio.gather(*(judge.judge(request(i)) for i in range(start, start + n)))
    elapsed = time.perf_counter() - t0
    assert all(r.p("yes") > 0.5 for r in results)
    return n / elapsed


async def main_async(rounds: int, per_round: int) -> None:
    proc, port = start_server()
    try:
        base = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "bench",
                "timeout_s": 10.0, "deadline_s": 120.0, "cache_size": per_round}
        print(f"server answers after {LATENCY_S * 1000:.0f} ms (separate process)")
        print(f"RSS before: {rss_mb():.1f} MiB")
        small = OpenAIJudge("c8", OpenAIJudgeConfig(**base, max_concurrency=8), Metrics())
        rate8 = await run_round(small, 0, 200)
        await small.aclose()
        print(f"max_concurrency   8: {rate8:7.1f} eval/s  (Little's law cap {8 / LATENCY_S:.0f}; "
              f"{rate8 / (8 / LATENCY_S):.0%} of cap)")
        judge = OpenAIJudge("c64", OpenAIJudgeConfig(**base, max_concurrency=64), Metrics())
        cap = 64 / LATENCY_S
        rates = []
        for r in range(rounds):
            rate = await run_round(judge, 1_000_000 + r * per_round, per_round)
            rates.append(rate)
            print(f"max_concurrency  64: round {r + 1}: {per_round} evals, {rate:7.1f} eval/s "
                  f"({rate / cap:.0%} of the {cap:.0f}/s cap), RSS {rss_mb():.1f} MiB")
        await judge.aclose()
        print(f"scaling 8 -> 64: x{(sum(rates) / len(rates)) / rate8:.2f} "
              f"(ideal x{64 / 8:.0f})")
        print(f"RSS after: {rss_mb():.1f} MiB")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    """Parse arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(main_async(args.rounds, args.per_round))


if __name__ == "__main__":
    main()
