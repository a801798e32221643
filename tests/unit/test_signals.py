"""``install_stop_signals``: SIGTERM and a first Ctrl-C stop gracefully; a second exits now."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from evalstream.app.signals import EXIT_FORCED

# Runs in a child process: the second SIGINT calls os._exit, which would end pytest.
SCRIPT = textwrap.dedent("""
    import asyncio, os, signal, sys
    from evalstream.app.signals import install_stop_signals

    async def main() -> None:
        stops = []
        install_stop_signals(lambda: stops.append(1))
        for sig in sys.argv[1:]:
            os.kill(os.getpid(), getattr(signal, sig))
            await asyncio.sleep(0.05)  # the loop runs the handler
            print(len(stops), flush=True)

    asyncio.run(main())
""")


def run(*signals: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SCRIPT, *signals], capture_output=True,
                          text=True, timeout=30, check=False)


def test_sigterm_and_a_first_sigint_each_request_a_graceful_stop() -> None:
    proc = run("SIGTERM", "SIGINT", "SIGTERM")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["1", "2", "3"]


def test_a_second_sigint_exits_at_once_without_stopping_again() -> None:
    proc = run("SIGINT", "SIGINT", "SIGTERM")
    assert proc.returncode == EXIT_FORCED
    assert proc.stdout.split() == ["1"]


HOOKED = textwrap.dedent("""
    import asyncio, os, signal
    from evalstream.app.signals import install_stop_signals

    async def main() -> None:
        install_stop_signals(lambda: print("stop", flush=True),
                             before_forced_exit=lambda: print("hook", flush=True))
        for _ in range(2):
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(0.05)

    asyncio.run(main())
""")


def test_a_second_sigint_runs_the_hook_before_the_forced_exit() -> None:
    # The forced exit runs no finally: the demo ends its broker (a session of its own) here.
    proc = subprocess.run([sys.executable, "-c", HOOKED], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == EXIT_FORCED
    assert proc.stdout.split() == ["stop", "hook"]


# Signals that arrive before the loop runs (the process is still importing and loading):
# remembered by ``catch_stop_signals_early`` and acted on once the loop's handlers are in.
EARLY = textwrap.dedent("""
    import asyncio, os, signal, sys
    import uvloop
    from evalstream.app.signals import catch_stop_signals_early, install_stop_signals

    before, during = sys.argv[2].split(","), sys.argv[3:]
    # As a shell starts a command in a terminal: a child of a process that ignores SIGINT
    # (a CI run started in the background, `cmd &`) inherits it ignored, and the check
    # below would then compare the restored handler with Python's default for nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    async def main() -> None:
        stops = []
        install_stop_signals(lambda: stops.append(1))
        print(len(stops), flush=True)
        for sig in during:
            os.kill(os.getpid(), getattr(signal, sig))
            await asyncio.sleep(0.05)
            print(len(stops), flush=True)
        await asyncio.sleep(0.1)  # nothing delivered twice
        print(len(stops), flush=True)

    with catch_stop_signals_early():
        for sig in filter(None, before):
            os.kill(os.getpid(), getattr(signal, sig))
            print("early", flush=True)
        (uvloop.run if sys.argv[1] == "uvloop" else asyncio.run)(main())
    print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
          signal.getsignal(signal.SIGINT) is signal.default_int_handler, flush=True)
""")


def run_early(loop: str, before: str, *during: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", EARLY, loop, before, *during],
                          capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_stop_before_the_loop_runs_is_acted_on_once_it_does(loop: str, sig: str) -> None:
    # Used to end the process with Python's default action (SIGTERM: 143).
    proc = run_early(loop, sig)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[:3] == ["early", "1", "1"], proc.stdout  # stopped once, as soon as installed
    assert lines[3] == "True True"  # the previous handlers are back


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_second_sigint_before_the_loop_runs_exits_at_once(loop: str) -> None:
    proc = run_early(loop, "SIGINT,SIGINT")
    assert proc.returncode == EXIT_FORCED
    assert proc.stdout.split() == ["early"]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_an_early_sigint_counts_as_the_first(loop: str) -> None:
    proc = run_early(loop, "SIGINT", "SIGINT")
    assert proc.returncode == EXIT_FORCED
    assert proc.stdout.split() == ["early", "1"]


def test_without_an_early_signal_nothing_is_stopped() -> None:
    proc = run_early("uvloop", "", "SIGTERM")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["0", "1", "1"]


# ``evalstream run`` catches a stop before its first heavy import: until then a SIGTERM
# (a rollout replacing a pod that is still starting) kills it with 143. The probe records
# whether SIGTERM still had Python's default action when the first heavy module was
# imported. Was: importlib.metadata (the package's version), asyncio and yaml (cli.py) and
# argparse all came first, ~0.25 s of a 0.3 s window (bench/early_sigterm.py).
HEAVY = ("argparse", "asyncio", "yaml", "importlib.metadata", "pydantic", "aiokafka")
FIRST_HEAVY_IMPORT = textwrap.dedent("""
    import runpy, signal, sys

    seen = []

    class Probe:
        def find_spec(self, name, path=None, target=None):
            if name in HEAVY and not seen:
                seen.append((name, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL))
            return None

    sys.meta_path.insert(0, Probe())
    sys.argv = ["evalstream", "run", "--config", "/nonexistent/evalstream.yaml"]
    try:
        if ENTRY == "script":  # what the installed `evalstream` script does
            from evalstream.cli import main
            code = main()
        else:
            runpy.run_module("evalstream", run_name="__main__")
    except SystemExit as exc:
        code = exc.code
    print(code, seen)
""")


@pytest.mark.parametrize("entry", ["script", "module"])
def test_run_catches_a_stop_before_its_first_heavy_import(entry: str) -> None:
    script = f"HEAVY = {HEAVY!r}\nENTRY = {entry!r}\n" + FIRST_HEAVY_IMPORT
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    code, _, seen = proc.stdout.strip().partition(" ")
    assert code == "2"  # the missing config file: a configuration error, as always
    name, default = ast.literal_eval(seen)[0]
    assert default is False, f"{name} was imported while SIGTERM still killed the process"
