"""Time limits on waits: an ``asyncio.Event`` wait that honours cancel, and a deadline
that several steps share."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any

__all__ = ["SharedDeadline", "unless_set", "wait_set"]


async def wait_set(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes (None: no limit); whether it is set.

    ``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11 wait_for returns
    normally, dropping the cancel, when its task is cancelled just as the wait ends, and
    the tasks that wait here (intake, the drift monitor, the demo's loops) are stopped by
    cancelling them. A lost cancel once hung the worker's stop for good.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()


async def unless_set(event: asyncio.Event, work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` until it ends or ``event`` is set, which cancels it; whether it ended.

    The cancelled work is waited for, so its own clean-up (closing a client it was
    starting) is done on return. Its exception, if it ended with one, is raised.
    """
    task = asyncio.ensure_future(work)
    setter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait((task, setter), return_when=asyncio.FIRST_COMPLETED)
    finally:
        setter.cancel()
        if not task.done():
            task.cancel()
            # asyncio.wait, not ``await task``: a cancel of this caller (a timeout around
            # it) must still reach it, not be taken for the work's own CancelledError.
            await asyncio.wait((task,))
    if task.cancelled():
        return False
    task.result()
    return True


class SharedDeadline:
    """A deadline several steps share: each gets what is left, within bounds.

    Args:
        total_s: Time for all the steps together, from now.
        step_max_s: No one step gets more, so a hung step leaves time to the others.
        step_min_s: Every step gets at least this, even once the total is spent (e.g. to
            close its sockets).
    """

    def __init__(self, total_s: float, step_max_s: float, step_min_s: float) -> None:
        self._deadline = time.monotonic() + total_s
        self._max = step_max_s
        self._min = step_min_s

    def step(self) -> float:
        """Seconds the next step may take."""
        left = self._deadline - time.monotonic()
        return max(self._min, min(self._max, left))
