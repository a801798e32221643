"""The command line: ``evalstream run | check-config | list-evaluators | eval | demo |
join-labels``.

Every configuration problem (unreadable or unparseable YAML, unknown key, wrong type,
missing field, unknown evaluator, bad evaluator params) exits with code 2 and a message
naming the field, before anything connects. ``eval`` and ``demo`` are implemented in
``evalstream.app.offline``, ``evalstream.app.demo`` and ``evalstream.app.labels_job`` and
imported only when used.
"""

from __future__ import annotations

import sys

from evalstream.errors import ConfigError

# typing.TYPE_CHECKING without importing typing (~15 ms before the signal handling is in).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Coroutine, Sequence
    from typing import Any

# Only what ``main`` needs before it installs ``run``'s early stop-signal handling is
# imported here (the rest where used): until then a SIGTERM kills the process (exit 143).

__all__ = ["EXIT_CONFIG", "main"]

#: Exit code for any configuration error (the usage-error convention).
EXIT_CONFIG = 2

#: Commands whose module supplies ``add_arguments(parser)`` and ``main(args)``; imported only
#: when the command is given, so ``run`` never loads the demo or the offline scorer.
_DELEGATED = {
    "eval": ("evalstream.app.offline", "score a JSONL file of events with the configured routes"),
    "demo": ("evalstream.app.demo", "run a local broker, sample traffic and the worker"),
    "join-labels": ("evalstream.app.labels_job",
                    "join human labels from labels.topic with the results; calibration metrics"),
}


def _parser() -> argparse.ArgumentParser:
    import argparse

    class _Version(argparse.Action):
        # argparse's "version" action wants the text up front; looking the version up
        # (importlib.metadata, ~0.1 s) is left to ``--version`` itself, not every command.
        def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                             help="show program's version number and exit")

        def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
            from evalstream import __version__

            print(f"evalstream {__version__}")  # to stdout, as argparse's action does
            parser.exit()

    parser = argparse.ArgumentParser(
        prog="evalstream", description="Online evaluation of LLM traces flowing through Kafka.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run the streaming worker")
    run.add_argument("--config", "-c", help="YAML config file (EVALSTREAM_* env vars override)")
    run.add_argument("--until-caught-up", action="store_true",
                     help="stop (exit 0) once every assigned partition is committed up to "
                          "the end offset it had when assigned (a backfill Job); exit 1 "
                          "if stopped before")
    check = sub.add_parser("check-config", help="validate a config and print it, secrets masked")
    check.add_argument("config", help="YAML config file")
    sub.add_parser("list-evaluators", help="list the available evaluators")
    for name, (_, help_text) in _DELEGATED.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _config_error(exc: ConfigError) -> int:
    print(f"evalstream: configuration error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def _run_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop where it is installed (faster callbacks and sockets)."""
    import asyncio

    try:
        import uvloop
    except ImportError:  # e.g. Windows: the standard loop works, only slower
        return asyncio.run(main)
    return uvloop.run(main)


def _run(args: argparse.Namespace) -> int:
    # Called within ``catch_stop_signals_early`` (see ``main``): a SIGTERM during the slow
    # part (imports, validation, building the evaluators) is acted on once the loop runs.
    from evalstream.app.worker import run_worker
    from evalstream.config import load_settings
    from evalstream.logging import configure_logging

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return _config_error(exc)
    configure_logging(settings.logging.level, settings.logging.format)
    try:
        # run_worker builds judges, evaluators and decoders before connecting anything,
        # so a bad evaluator parameter fails here with code 2.
        return _run_loop(run_worker(settings, until_caught_up=args.until_caught_up))
    except ConfigError as exc:
        return _config_error(exc)


def _check_config(args: argparse.Namespace) -> int:
    import yaml

    from evalstream.app.checks import effective_config
    from evalstream.config import load_settings

    try:
        settings = load_settings(args.config)
        effective, warnings = effective_config(settings)
    except ConfigError as exc:
        return _config_error(exc)
    for warning in warnings:
        print(f"evalstream: warning: {warning}", file=sys.stderr)
    print(f"# {args.config}: valid. Effective configuration (defaults filled in, "
          f"secrets masked):")
    print(yaml.safe_dump(effective, sort_keys=False, allow_unicode=True), end="")
    return 0


def _list_evaluators() -> int:
    from evalstream.app.checks import describe_evaluators

    rows = [(name, f"v{version}", summary) for name, version, summary in describe_evaluators()]
    width = max((len(name) for name, _, _ in rows), default=0)
    vwidth = max((len(version) for _, version, _ in rows), default=0)
    for name, version, summary in rows:
        print(f"{name.ljust(width)}  {version.ljust(vwidth)}  {summary}")
    return 0


def _delegate(command: str, argv: Sequence[str]) -> int:
    import argparse
    import importlib

    module_name, help_text = _DELEGATED[command]
    module: Any = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"evalstream {command}", description=help_text)
    module.add_arguments(parser)
    args = parser.parse_args(list(argv))
    try:
        return int(module.main(args))
    except ConfigError as exc:
        return _config_error(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evalstream`` script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        from evalstream.app.signals import catch_stop_signals_early

        # First thing, before the slow part (argparse, imports, validation, building the
        # evaluators): a SIGTERM from a rollout that replaces a still-starting pod must
        # stop it cleanly (exit 0, one log line), not kill it with Python's default action
        # (exit 143). Only ``run``: other commands keep the default (a SIGTERM ends them).
        with catch_stop_signals_early():
            return _main(argv)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C before a command handles it itself (the demo while it imports) or in one
        # that does not: a line, not a traceback. 130 = 128 + SIGINT, as a shell says it.
        print("evalstream: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str]) -> int:
    if argv and argv[0] in _DELEGATED:
        return _delegate(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "check-config":
        return _check_config(args)
    if args.command == "list-evaluators":
        return _list_evaluators()
    return EXIT_CONFIG  # pragma: no cover - argparse rejects unknown commands itself
