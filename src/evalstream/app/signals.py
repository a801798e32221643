"""How the worker and the demo are stopped from outside: SIGTERM, and Ctrl-C once or twice."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

__all__ = ["EXIT_FORCED", "install_stop_signals"]

#: The exit code of a second Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_FORCED = 130


def install_stop_signals(stop: Callable[[], None]) -> None:
    """SIGTERM and a first SIGINT call ``stop`` (a graceful stop); a second SIGINT exits at
    once with :data:`EXIT_FORCED`, skipping the drain: what was not committed is
    redelivered. Only possible in the main thread, with the loop running.
    """
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            os._exit(EXIT_FORCED)  # "now": whoever pressed twice does not want to wait
        stop()

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, on_sigint)
