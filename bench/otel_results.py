"""Encode cost of the OpenTelemetry copy of a result (``topics.otel_results``), per result.

What a route pays per published result once ``topics.otel_results`` is set, on top of the
result's own JSON: ``otel_result`` in each encoding, as microseconds and as a ratio to
``dump_json(result)`` (what every result costs today) measured in the same rounds. Also the
OTLP/JSON built through ``google.protobuf.json_format.MessageToDict`` (hex ids patched in),
the library route that ``sinks/otel_results.py`` does not take, to show why.

Best of ``--rounds`` rounds of ``--n`` results each (a shared machine: the minimum is the
least disturbed). Two results: a full one (score, label, reason, judge, response id) and an
error result.

Run: ``PYTHONPATH=src python bench/otel_results.py`` (a few seconds).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

from evalstream.events import EvalResult, JudgeInfo, dump_json
from evalstream.sinks.otel_results import otel_result

FULL = EvalResult(
    result_id="5" * 32, event_id="e1", trace_id="0af7651916cd43dd8448eb211c80319c",
    span_id="b7ad6b7169203331", route="support", evaluator="refusal", evaluator_version="1",
    score=0.12, label="refusal", passed=False, threshold=0.5,
    reason="The answer declines to help with a benign billing question.",
    attributes={"response_id": "chatcmpl-9x8y7z", "model": "gpt-4o-mini"},
    judge=JudgeInfo(backend="openai", model="gpt-4o-mini", latency_ms=412.0, tokens_in=310,
                    tokens_out=24, cost_usd=0.0001), sample_rate=0.1)
ERROR = EvalResult(
    result_id="6" * 32, event_id="e2", trace_id="0af7651916cd43dd8448eb211c80319d",
    span_id="b7ad6b7169203332", route="support", evaluator="refusal", status="error",
    error="judge: HTTP 503 from the judge")


def _via_json_format(result: EvalResult) -> bytes:
    proto = otel_result(result, service_name="evalstream", scope_version="1", observed_ns=1)
    request = ExportLogsServiceRequest.FromString(proto)
    data = json_format.MessageToDict(request)
    log = data["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    record = request.resource_logs[0].scope_logs[0].log_records[0]
    log["traceId"], log["spanId"] = record.trace_id.hex(), record.span_id.hex()
    return dump_json(data)


def _best_us(fn: Callable[[], object], n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - started) / n)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=5_000, help="results per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"{'result':<8}{'encoding':<28}{'us/result':>10}{'x dump_json':>13}")
    for name, result in (("full", FULL), ("error", ERROR)):
        cases: list[tuple[str, Callable[[], object]]] = [
            ("dump_json (baseline)", lambda r=result: dump_json(r)),
            ("otlp_proto", lambda r=result: otel_result(
                r, service_name="evalstream", scope_version="1", observed_ns=1)),
            ("otlp_json", lambda r=result: otel_result(
                r, service_name="evalstream", scope_version="1", encoding="otlp_json",
                observed_ns=1)),
            ("otlp_json via json_format", lambda r=result: _via_json_format(r)),
        ]
        # Interleaved rounds would be fairer still; baseline first and last bounds the drift.
        base = _best_us(cases[0][1], args.n, args.rounds)
        for label, fn in cases:
            us = base if label.startswith("dump_json") else _best_us(fn, args.n, args.rounds)
            print(f"{name:<8}{label:<28}{us:>10.2f}{us / base:>13.2f}")
        again = _best_us(cases[0][1], args.n, args.rounds)
        print(f"{name:<8}{'dump_json (again)':<28}{again:>10.2f}{again / base:>13.2f}")


if __name__ == "__main__":
    main()
