"""Waiting for an ``asyncio.Event`` with a time limit, in tasks that are stopped by cancel."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["wait_set"]


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
