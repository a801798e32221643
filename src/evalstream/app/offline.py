"""``evalstream eval``: score JSONL files offline with the same routes and judges as the worker.

This module owns the command: its options, the scoring run and what is printed. The
settings it scores with (``--config``, or by default one route per evaldata data set to its
own evaluator with the builtin judge; ``--judge``) are ``app/offline_settings.py``'s;
reading and checking the input lines (evaldata items or trace events decoded as the routed
input's messages) is ``app/offline_input.py``; the summary's statistics are
``app/offline_report.py``; the warnings saying why nothing was evaluated,
``app/offline_hints.py``.

Every event goes through ``Pipeline.evaluate`` (sampling, routing, evaluators; with
``--no-sampling`` every sample rate above 0 is 1), results go to ``--output`` as JSONL, and
a summary per (route, evaluator) is printed: pass rate with a 95% Wilson interval, mean
score and, where items carry gold labels, accuracy, macro-F1, Brier score and expected
calibration error; and what the judges cost (requests and tokens per evaluation, USD in all
and per 1,000 evaluations when a judge is priced), with a total line:
what a sample costs tells what turning the evaluator on for live traffic would. With
``--json`` the same figures are one JSON document (``app/offline_json.py``), on stdout in
place of the table, for CI gates and notebooks; everything else goes to stderr.

Bad input lines (not JSON, not UTF-8, not a trace event or evaldata item) are reported as
``file:line: reason``, skipped and counted in the summary, like a dead letter in the worker:
one broken line in an export must not throw away the rest of a long run. The exit code is 2
when nothing could be read (or, with ``--strict``, when any line is bad), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import IO

import prometheus_client
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from evalstream.app.calibration import parse_gold, parse_result_gold
from evalstream.app.offline_hints import invalid_gold_hint, sampled_out_hint, unrouted_hint
from evalstream.app.offline_input import STDIN, Item, input_paths, read_items, routed_input
from evalstream.app.offline_json import summary_json
from evalstream.app.offline_report import Summary
from evalstream.app.offline_settings import (
    declared_params,
    default_settings,
    with_judge,
    without_sampling,
)
from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import attributes_read
from evalstream.config import Settings, load_settings
from evalstream.errors import ConfigError, EvalstreamError
from evalstream.evaluators import registry
from evalstream.events import EvalResult, dump_json
from evalstream.judges.base import Judge
from evalstream.judges.registry import build_judges, close_judges
from evalstream.logging import configure_logging
from evalstream.metrics import Metrics

# default_settings and the hints are re-exported: they were this module's before the split.
__all__ = ["add_arguments", "default_settings", "main", "run", "sampled_out_hint", "unrouted_hint"]

EPILOG = (
    "Bad input lines (not UTF-8, not JSON, not a trace event or evaldata item) are reported "
    "as FILE:LINE: reason, skipped and counted in the summary. Exit codes: 0 when the items "
    "that could be read were scored (also when none matched a route: a warning then says "
    "what the routes match on); 2 on a configuration error, when no line could be read, "
    "or with --strict when any line is bad; 130 after a Ctrl-C (no summary; --output "
    "keeps the results scored so far)."
)
#: The exit code after a Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130
#: Bad lines printed one by one; the rest are only counted.
SHOWN_BAD_LINES = 20

def _at_least_one(text: str) -> int:
    """``--concurrency``: an int of 1 or more (0 and below were taken as 1, unsaid)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``eval`` options to ``parser`` (the CLI calls this for its sub-command)."""
    parser.epilog = EPILOG
    parser.add_argument("--config", type=Path, default=None,
                        help="worker config (routes, judges); default: route every evaldata "
                             "item to its own evaluator with the builtin judge")
    parser.add_argument("--input", "-i", action="append", required=True, metavar="PATH",
                        help="JSONL file or glob (repeatable), gzipped or not; '-' reads "
                             "stdin: TraceEvents or evaldata items")
    parser.add_argument("--output", "-o", type=Path, default=None,
                        help="write every EvalResult as JSONL here; '-' on stdout (the "
                             "summary table then goes to stderr)")
    parser.add_argument("--judge", default=None,
                        help="use this judge (by name) for every evaluator")
    parser.add_argument("--topic", default=None,
                        help="topic the events are routed as (default: the first input topic)")
    parser.add_argument("--concurrency", type=_at_least_one, default=16,
                        help="events evaluated at once (default 16)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the summary table as Markdown here")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                        help="the summary as one JSON document (the table's figures as "
                             "numbers; keys in docs/evaluation.md): alone or with PATH '-', "
                             "on stdout instead of the table (warnings stay on stderr); "
                             "with a PATH, also written there")
    parser.add_argument("--no-sampling", action="store_true",
                        help="ignore the config's sample rates (sampling.rate, each route's "
                             "sample_rate and strata rates, each evaluator's sample_rate): "
                             "score every routed item with every evaluator of its routes; "
                             "a rate of 0 still turns its route or stratum off")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--strict", action="store_true",
                        help="stop with exit code 2 at the first bad input line instead of "
                             "skipping it")


async def run(settings: Settings, items: Sequence[Item], *, topic: str, concurrency: int = 16,
              sink: IO[bytes] | None = None, progress: Progress | None = None,
              judges: Mapping[str, Judge] | None = None) -> Summary:
    """Evaluate ``items`` through a ``Pipeline`` built from ``settings``; summarise.

    Args:
        settings: Routes and judges.
        items: What to score.
        topic: The topic the events are routed as.
        concurrency: Events evaluated at once.
        sink: Where each result is written as a JSON line.
        progress: A started rich progress display to advance.
        judges: Judges to use instead of building them from ``settings`` (tests); the
            caller closes them.
    """
    metrics = Metrics()
    owned = judges is None
    if judges is None:
        judges = build_judges(settings.judges, metrics)
    summary = Summary(items=len(items))
    try:
        pipeline = Pipeline(settings, judges, metrics)
        # Gold labels are about the data set's own evaluator; other evaluators in the route
        # are summarised without them. A canary's result carries its own gold answer.
        kinds = {(r.name, s.label): s.evaluator for r in settings.routes for s in r.evaluators}
        label_kinds = {key: registry.get(name).is_label_evaluator
                       for key, name in kinds.items()}
        task = progress.add_task("evaluating", total=len(items)) if progress else None
        # One iterator shared by the workers: each takes the next item when it is free.
        pending = iter(items)

        async def worker() -> None:
            for item in pending:
                results: list[EvalResult] = await pipeline.evaluate(item.event, topic=topic)
                if not results:
                    summary.without_results += 1
                for result in results:
                    key = (result.route, result.evaluator)
                    if result.canary:
                        gold = _canary_gold(result, is_label=label_kinds[key])
                    elif item.gold is not None and kinds.get(key) == item.dataset:
                        gold = _item_gold(item.gold, result, is_label=label_kinds[key])
                        summary.invalid_gold += gold is None
                    else:
                        gold = None
                    summary.add(result, gold)
                    if sink is not None:
                        sink.write(dump_json(result) + b"\n")
                if progress is not None and task is not None:
                    progress.advance(task)

        workers = [asyncio.create_task(worker()) for _ in range(max(1, concurrency))]
        try:
            await asyncio.gather(*workers)
        finally:
            # One worker raised (or we were cancelled): stop the others before closing the
            # clients they are using, and never leave those clients open.
            for running in workers:
                running.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await pipeline.aclose()
        summary.skipped = {
            sample.labels["reason"]: int(sample.value)
            for family in metrics.events_skipped.collect() for sample in family.samples
            if sample.name.endswith("_total") and sample.value}
        summary.metered_tokens = int(_total(metrics.judge_tokens))
        summary.metered_cost_usd = _total(metrics.judge_cost)
    finally:
        if owned:
            await close_judges(judges)
    return summary


def _canary_gold(result: EvalResult, *, is_label: bool) -> bool | str | None:
    """A canary result's gold answer, as the worker compares it (``gold`` holds a valid
    one as text, or null when the canary gave none or an invalid one)."""
    return None if result.gold is None else parse_gold(result.gold, is_label=is_label).value


def _item_gold(gold: bool | str, result: EvalResult, *, is_label: bool) -> bool | str | None:
    """An item's gold label as the evaluator is compared with it, or None when it cannot
    be: a binary evaluator's is ``true``/``false`` (a JSON boolean, or that text in any
    case, as a canary's gold answer), a label evaluator's one of its classes (``result``'s
    probabilities cover them all, as join-labels reads them; an error result has none, so
    any class name is kept for it)."""
    if isinstance(gold, bool):
        return None if is_label else gold
    return parse_result_gold(gold, result.probabilities, is_label=is_label).value


def _total(counter: prometheus_client.Counter) -> float:
    """The sum of ``counter`` over all its label values (0.0, a float, when it has none)."""
    return sum((sample.value for family in counter.collect() for sample in family.samples
                if sample.name.endswith("_total")), 0.0)


def _refuse_overwriting_an_input(paths: Sequence[Path], args: argparse.Namespace) -> None:
    """Raise ``ConfigError`` when a file this run writes is one it reads: a glob that
    matches the last run's results read them as input, then overwrote them, and
    ``-i data.jsonl -o data.jsonl`` replaced the data with results."""
    written = [(option, Path(path)) for option, path in
               (("--output", args.output), ("--markdown", args.markdown), ("--json", args.json))
               if path is not None and str(path) != STDIN]
    for option, target in written:
        if target.exists() and any(str(p) != STDIN and p.exists() and target.samefile(p)
                                   for p in paths):
            raise ConfigError(f"{option} {target} is also an --input file: it would be "
                              "overwritten; write the results elsewhere")


def _report_bad_lines(console: Console, bad_lines: Sequence[str]) -> None:
    """Print the first ``SHOWN_BAD_LINES`` skipped lines and how many more there were."""
    for problem in bad_lines[:SHOWN_BAD_LINES]:
        # Escaped: "turns[0]" in a reason is text, not rich markup.
        console.print(f"[yellow]skipped[/yellow] {escape(problem)}", highlight=False,
                      soft_wrap=True)
    if len(bad_lines) > SHOWN_BAD_LINES:
        console.print(f"[yellow]skipped[/yellow] {len(bad_lines) - SHOWN_BAD_LINES} more "
                      "bad lines")


def _headline(summary: Summary) -> str:
    why = ", ".join(f"{reason}: {n}" for reason, n in sorted(summary.skipped.items()))
    return (f"evalstream eval: {summary.items} items, {summary.without_results} without "
            f"results{f' ({why})' if why and summary.without_results else ''}, "
            f"{summary.bad_lines} bad input lines skipped")


def _table(summary: Summary) -> Table:
    table = Table()
    rows = summary.rows()
    for column in rows[0] if rows else ["(no results)"]:
        table.add_column(column, justify="left" if column in ("route", "evaluator") else "right")
    for row in rows:
        table.add_row(*row.values())
    return table


def main(args: argparse.Namespace) -> int:
    """Run ``evalstream eval``; 0 on success, 2 on a configuration or input error.

    Bad lines are skipped and reported (see ``EPILOG``); 2 when no line could be read, or
    with ``--strict`` at the first bad line.
    """
    console = Console(stderr=True)
    bad_lines: list[str] = []
    sink: IO[bytes] | None = None
    try:
        config = load_settings(args.config) if args.config is not None else None
        # To stderr, as the worker's: unconfigured, structlog printed a judge's retry and
        # failure lines on stdout, in the middle of the summary a script reads there.
        configure_logging(config.logging.level if config else "INFO", "console")
        routed = routed_input(config, args.topic)
        carry = (attributes_read(config, declared_params(config))[routed.topic]
                 if config and routed else ())
        to_stdout = args.output is not None and str(args.output) == STDIN
        if to_stdout and args.json == STDIN:
            # Both on stdout, results and summary would interleave into neither format.
            raise ConfigError("--output - and --json on stdout: give one of them a PATH")
        paths = input_paths(args.input)
        _refuse_overwriting_an_input(paths, args)
        items = list(read_items(paths, None if args.strict else bad_lines, routed, carry))
        _report_bad_lines(console, bad_lines)
        if not items:
            raise ConfigError(f"no item could be read from --input ({len(bad_lines)} bad "
                              "lines)" if bad_lines else "--input holds no items")
        settings = config if config is not None else default_settings(
            [i.dataset for i in items if i.dataset])
        if args.judge:
            settings = with_judge(settings, args.judge)
        if args.no_sampling:
            settings = without_sampling(settings)
        topic = args.topic or settings.inputs[0].topic
        with ExitStack() as stack:
            # '-': stdout's own buffer, flushed per result and left open (a created file
            # named "-" was the surprise before).
            sink = (sys.stdout.buffer if to_stdout else
                    stack.enter_context(args.output.open("wb")) if args.output else None)
            # Opened before the run: a path that cannot be written fails now (exit 2), not
            # in a traceback after a run the judges were paid for.
            markdown = (stack.enter_context(args.markdown.open("w", encoding="utf-8"))
                        if args.markdown else None)
            json_file = (stack.enter_context(Path(args.json).open("w", encoding="utf-8"))
                         if args.json not in (None, "-") else None)
            progress = None
            if not args.no_progress:
                progress = stack.enter_context(Progress(
                    TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True))
            summary = asyncio.run(run(settings, items, topic=topic,
                                      concurrency=args.concurrency,
                                      sink=sink, progress=progress))
            summary.bad_lines = len(bad_lines)
            if markdown is not None:
                markdown.write(summary.markdown())
            document = (summary_json(summary, no_sampling=args.no_sampling)
                        if args.json else None)
            if json_file is not None and document is not None:
                json_file.write(document + "\n")
    except (EvalstreamError, OSError) as exc:
        # Escaped: "[address]:port" in a message is text, not rich markup (it vanished);
        # unwrapped, so that a path in it stays whole.
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: no summary (a partial one would read as the file's); the judges and the
        # output file were closed on the way out, so what was scored is in it, whole lines.
        kept = (f"; the results scored so far are in {args.output}"
                if sink is not None and sink is not sys.stdout.buffer else "")
        console.print(f"evalstream eval: interrupted, no summary{escape(kept)}",
                      highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if args.json == "-" and document is not None:
        # Alone on stdout, so that it parses: progress, bad lines and warnings are on stderr.
        sys.stdout.write(document + "\n")
    else:
        # A line of its own: as the table's title it wrapped to the table's width, word by
        # word when there is one narrow column (no results). On stderr when stdout carries
        # the results (--output -), so that they stay JSONL.
        out = Console(width=200, stderr=to_stdout)
        out.print(_headline(summary), highlight=False)
        out.print(_table(summary))
        out.print(summary.spend_line(), highlight=False)
    for hint in (unrouted_hint(summary, settings, items, topic),
                 sampled_out_hint(summary, no_sampling=args.no_sampling),
                 invalid_gold_hint(summary)):
        if hint is None:
            continue
        # Last, after the (empty) table, so that it is what the terminal ends with. Exit 0
        # still, as when every item is skipped by its evaluators: the config is valid and
        # the input was read; only exit 2 says either is not.
        console.print(f"[bold yellow]evalstream eval: warning:[/bold yellow] {escape(hint)}",
                      highlight=False, soft_wrap=True)
    return 0

