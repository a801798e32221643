"""Cost of reading a judge's answer with ``post_bounded`` (streamed, size-limited, zlib
decoding) against httpx's own ``client.post`` (whole body, httpx decoding), same server,
same run.

The fake OpenAI-compatible server runs in its own process; requests go one at a time, so
the figure is client CPU + loopback latency per request. Printed: microseconds per request
for each reader (median of interleaved rounds) and their ratio (bounded / plain).

Run: ``python bench/judge_body_read.py [--requests 500] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from evalstream.judges.http_pool import post_bounded

ROOT = Path(__file__).resolve().parents[1]
BODY = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}],
        "max_tokens": 1, "logprobs": True, "top_logprobs": 10}


def start_server() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.llm_server"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


async def per_request_us(client: httpx.AsyncClient, bounded: bool, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        if bounded:
            response = await post_bounded(client, "chat/completions", BODY)
        else:
            response = await client.post("chat/completions", json=BODY)
        response.json()
    return (time.perf_counter() - start) / n * 1e6


async def main(n: int, rounds: int) -> None:
    proc, port = start_server()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1/") as client:
            await per_request_us(client, True, 50)  # warm up the connection
            for bounded in (False, True):
                await per_request_us(client, bounded, 50)
            # Interleaved rounds, medians: the machine is shared and drifts.
            plain_runs, bounded_runs = [], []
            for _ in range(rounds):
                plain_runs.append(await per_request_us(client, False, n))
                bounded_runs.append(await per_request_us(client, True, n))
        plain, limited = statistics.median(plain_runs), statistics.median(bounded_runs)
        print(f"client.post:  {plain:8.1f} us/request (median of {rounds} rounds of {n})")
        print(f"post_bounded: {limited:8.1f} us/request")
        print(f"ratio bounded/plain: {limited / plain:.3f}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.rounds))
