"""How the worker and the demo are stopped from outside: SIGTERM, and Ctrl-C once or twice.

A process that is still starting (importing, loading the configuration, building the
evaluators) has no event loop to take a signal yet, and Python's default action for SIGTERM
ends it on the spot (exit 143). :func:`catch_stop_signals_early` remembers such a request
until :func:`install_stop_signals` takes over, which then stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable, Iterator
    from types import FrameType
    from typing import Protocol

    class Stoppable(Protocol):
        """A service run until asked to stop: the worker, the label joiner."""

        def request_stop(self) -> None: ...

        async def run(self, ready_event: asyncio.Event | None = None) -> int: ...

# Nothing heavy at import time (asyncio is imported where the loop's handlers are
# installed): ``evalstream run`` imports this module first, to catch a SIGTERM as early as
# it can (see ``cli.main``).

__all__ = ["EXIT_FORCED", "catch_stop_signals_early", "install_stop_signals",
           "run_until_stopped"]

#: The exit code of a second Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_FORCED = 130


class _Requests:
    """Stop requests seen so far: whether one came, and how many Ctrl-Cs."""

    stop = False
    interrupts = 0


_requests = _Requests()


def _count_interrupt(before_exit: Callable[[], None] | None = None) -> None:
    """Count a SIGINT; the second calls ``before_exit`` (if any), then exits at once."""
    _requests.interrupts += 1
    if _requests.interrupts > 1:
        if before_exit is not None:
            before_exit()
        os._exit(EXIT_FORCED)  # "now": whoever pressed twice does not want to wait


@contextlib.contextmanager
def catch_stop_signals_early() -> Iterator[None]:
    """Until the event loop runs: SIGTERM or a first SIGINT is remembered (and acted on by
    :func:`install_stop_signals`); a second SIGINT exits at once with :data:`EXIT_FORCED`.

    The handler only sets a flag: whatever is running (an import, the configuration's
    validation) finishes undisturbed. On leaving, the previous handlers are restored and
    the requests forgotten (the command line can be called in-process, e.g. by tests).
    Only possible in the main thread.
    """
    def remember(signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            _count_interrupt()
        _requests.stop = True

    previous = {sig: signal.signal(sig, remember) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requests.stop, _requests.interrupts = False, 0


def install_stop_signals(stop: Callable[[], None], *,
                         before_forced_exit: Callable[[], None] | None = None) -> None:
    """SIGTERM and a first SIGINT call ``stop`` (a graceful stop); a second SIGINT exits at
    once with :data:`EXIT_FORCED`, skipping the drain: what was not committed is
    redelivered. A stop requested since :func:`catch_stop_signals_early` calls ``stop``
    now (and a Ctrl-C then counts as the first). Only possible in the main thread, with the
    loop running.

    Args:
        stop: Requests a graceful stop.
        before_forced_exit: Called just before the forced exit, which runs no ``finally``
            or ``atexit``: to end what would outlive the process (the demo's broker, in a
            session of its own). It must be quick and must not raise.
    """
    import asyncio

    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        _count_interrupt(before_forced_exit)
        stop()

    loop.add_signal_handler(signal.SIGTERM, stop)
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    # Checked after the loop's handlers are in place, so no signal falls between the two.
    if _requests.stop:
        stop()


async def run_until_stopped(build: Callable[[], Awaitable[Stoppable]],
                            ready_event: asyncio.Event | None = None, *,
                            handle_signals: bool = True) -> int:
    """Build a service with ``build`` and run it until stopped; return its exit code.

    With ``handle_signals``, SIGTERM/SIGINT stop it (see :func:`install_stop_signals`) from
    before ``build`` starts: building can take a while, and a SIGTERM meanwhile (a rollout
    replacing a pod still starting) must stop the service once built, not kill it.
    """
    service: Stoppable | None = None
    stop_requested = False

    def request_stop() -> None:
        nonlocal stop_requested
        stop_requested = True
        if service is not None:
            service.request_stop()

    if handle_signals:
        install_stop_signals(request_stop)
    service = await build()
    if stop_requested:
        service.request_stop()
    return await service.run(ready_event)
