"""The label joiner's store: memory per held result and results joined per second.

Prints, for N slimmed results held waiting (binary and label evaluators), the bytes each
costs (tracemalloc) and the rate ``take`` decodes and stores results from JSON, relative to
decoding alone (``EvalResult.model_validate_json``) in the same run.

    PYTHONPATH=src python bench/label_join_store.py
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from evalstream.app.label_join import HeldResult, JoinStore, slim
from evalstream.events import EvalResult, dump_json
from evalstream.metrics import Metrics

N = 50_000


def result(i: int, label: bool) -> EvalResult:
    extra = ({"label": "billing", "probabilities": {"billing": 0.7, "shipping": 0.2,
                                                    "other": 0.1}} if label else
             {"passed": i % 3 != 0, "score": 0.9, "threshold": 0.5})
    return EvalResult(result_id=f"{i:032x}", event_id=f"event-{i}", trace_id=f"trace-{i}",
                      route="default", evaluator="topic" if label else "refusal",
                      reason="The assistant answered the question without refusing it.",
                      details={"matched": ["sure"], "model": "gpt-4o-mini"}, **extra)


def main() -> None:
    for label in (False, True):
        payloads = [dump_json(result(i, label).model_dump(mode="json")) for i in range(N)]
        t0 = time.perf_counter()
        for p in payloads:
            EvalResult.model_validate_json(p)
        decode_s = time.perf_counter() - t0
        def fill(payloads: list[bytes] = payloads, label: bool = label) -> JoinStore[int]:
            store: JoinStore[int] = JoinStore(Metrics(), lambda _: None, retention_s=1e9,
                                              max_results=N, max_labels=N)
            for i, p in enumerate(payloads):
                r = EvalResult.model_validate_json(p)
                store.add_result(HeldResult(r.route, r.evaluator, "builtin", label, slim(r)),
                                 ("results", 0), i, 0.0)
            return store

        t0 = time.perf_counter()
        fill()
        take_s = time.perf_counter() - t0
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = fill()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert kept.waiting()["result"] == N
        kind = "label evaluator" if label else "binary evaluator"
        print(f"{kind:17s}: {held / N:6.0f} bytes per held result "
              f"({held / 2**20:.1f} MiB for {N}); decode+store {N / take_s:8.0f} results/s "
              f"= {decode_s / take_s:.2f}x the rate of decoding alone "
              f"({N / decode_s:.0f}/s)")


if __name__ == "__main__":
    # No options: --help prints what it measures rather than running it.
    argparse.ArgumentParser(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
