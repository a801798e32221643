"""``install_stop_signals``: SIGTERM and a first Ctrl-C stop gracefully; a second exits now."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
