"""Time limits on waits: an ``asyncio.Event`` wait that honours cancel, and a deadline
that several steps share."""

from __future__ import annotations

import asyncio
import contextlib
import time

__all__ = ["SharedDeadline", "wait_set"]


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
