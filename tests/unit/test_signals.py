"""``install_stop_signals``: SIGTERM and a first Ctrl-C stop gracefully; a second exits now."""

from __future__ import annotations

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


# Signals that arrive before the loop runs (the process is still importing and loading):
# remembered by ``catch_stop_signals_early`` and acted on once the loop's handlers are in.
EARLY = textwrap.dedent("""
    import asyncio, os, signal, sys
    import uvloop
    from evalstream.app.signals import catch_stop_signals_early, install_stop_signals

    before, during = sys.argv[2].split(","), sys.argv[3:]

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
