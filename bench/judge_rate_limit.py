"""Requests a rate-limiting server receives with and without the judge-wide pause, same run.

A local OpenAI-compatible server (``tests/support/llm_server.FakeLLM``, real sockets)
answers every request with HTTP 429 for ``--window`` seconds, then answers normally. N
questions are asked at once (N = ``--concurrency``, like N in-flight evaluations); each is
retried until answered (``rate_limit_retry: until_deadline``). Printed per N and per
``Retry-After`` form: the requests the server received during the window with the pause
switched off (each request on its own: the baseline) and on, their ratio, and the time
until the last answer after the window (what the pause costs in catch-up).

Run: ``python bench/judge_rate_limit.py [--window 2] [--concurrency 4 16 64]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import structlog

from evalstream.config import OpenAIJudgeConfig
from evalstream.judges.base import JudgeRequest
from evalstream.judges.openai_compat import OpenAIJudge
from evalstream.metrics import Metrics

# The local OpenAI-compatible test server lives with the tests (repo root on the path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.llm_server import llm_server


async def window(n: int, window_s: float, retry_after: str, pause: bool) -> tuple[int, float]:
    """(requests received during the window, seconds from its end to the last answer)."""
    async with llm_server(always="429", retry_after=retry_after) as server:
        config = OpenAIJudgeConfig(base_url=server.url, model="m", timeout_s=5.0,
                                   deadline_s=60.0, max_retries=2, backoff_base_s=0.05,
                                   backoff_max_s=1.0, cache_size=0, max_concurrency=n)
        judge = OpenAIJudge("llm", config, Metrics())
        if not pause:
            judge._sender._pause_for = lambda _error: None  # type: ignore[method-assign]
        asks = [asyncio.create_task(judge.judge(JudgeRequest(
            task="refusal", instructions="i", question="q", data=(("output", f"x{i}"),))))
            for i in range(n)]
        await asyncio.sleep(window_s)
        sent = len(server.posts)
        server.always = None
        end = time.perf_counter()
        await asyncio.gather(*asks)
        caught_up = time.perf_counter() - end
        await judge.aclose()
    return sent, caught_up


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--window", type=float, default=2.0, help="seconds of 429s")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64])
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))  # quiet
    print(f"429 window {args.window:g} s; requests received during it, and catch-up after")
    print(f"{'N':>4} {'Retry-After':>11} {'alone':>6} {'paused':>6} {'ratio':>6} "
          f"{'catch-up alone':>15} {'catch-up paused':>16}")
    for n in args.concurrency:
        for retry_after in ("0.5", ""):
            alone, alone_s = await window(n, args.window, retry_after, pause=False)
            paused, paused_s = await window(n, args.window, retry_after, pause=True)
            print(f"{n:>4} {retry_after or 'none':>11} {alone:>6} {paused:>6} "
                  f"{paused / alone:>6.2f} {alone_s:>14.2f}s {paused_s:>15.2f}s")


if __name__ == "__main__":
    asyncio.run(main())
