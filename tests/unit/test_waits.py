"""``unless_set``: work that a stop event cancels, its clean-up done before it returns."""

from __future__ import annotations

import asyncio

import pytest

from evalstream.app.waits import unless_set


class Work:
    """A start-up step that hangs (no answer from the broker) and closes what it opened."""

    def __init__(self, hang: bool = True, fail: Exception | None = None) -> None:
        self.hang, self.fail = hang, fail
        self.started = asyncio.Event()
        self.closed = False

    async def __call__(self) -> None:
        self.started.set()
        try:
            if self.fail is not None:
                raise self.fail
            if self.hang:
                await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # closing takes a moment: it must be waited for
            self.closed = True
            raise


async def test_work_that_ends_returns_true() -> None:
    assert await unless_set(asyncio.Event(), Work(hang=False)()) is True


async def test_setting_the_event_cancels_the_work_and_waits_for_its_clean_up() -> None:
    stop, work = asyncio.Event(), Work()
    task = asyncio.create_task(unless_set(stop, work()))
    await asyncio.wait_for(work.started.wait(), 5)
    stop.set()
    assert await asyncio.wait_for(task, 5) is False
    assert work.closed


async def test_an_event_already_set_does_not_wait_for_the_work() -> None:
    stop, work = asyncio.Event(), Work()
    stop.set()
    assert await asyncio.wait_for(unless_set(stop, work()), 5) is False


async def test_the_works_error_is_raised() -> None:
    with pytest.raises(ConnectionError):
        await unless_set(asyncio.Event(), Work(fail=ConnectionError("refused"))())


async def test_a_timeout_around_it_still_fires_after_the_clean_up() -> None:
    work = Work()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await unless_set(asyncio.Event(), work())
    assert work.closed
