"""Delivery guarantees the mutation pass found untested: "nothing is lost, nothing is
committed early" in the watermark tracker and the commit loop.

Each test here was written against a mutant of ``app/offsets.py`` or ``app/commits.py``
that the rest of the suite let through; the docstrings name the bug each one catches.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry

from evalstream.app.commits import Committer
from evalstream.app.offsets import OffsetTracker
from evalstream.errors import SourceError
from evalstream.metrics import Metrics
from evalstream.sources.memory import MemorySource

TP = ("traces", 0)
OTHER = ("traces", 1)


def test_an_abandoned_later_offset_does_not_release_an_earlier_running_one() -> None:
    """The hold caps the position; it must never raise it past unfinished work."""
    t = OffsetTracker()
    t.assign([TP])
    early = t.track(TP, 2, 1)
    assert early is not None
    t.track(TP, 5, 2)
    t.abandon(early, 5, 2)  # offset 5's work never starts; offset 2 is still running
    assert t.committable() == {TP: 2}
    t.done(early, 2)
    assert t.committable() == {TP: 5}  # and then up to the abandoned one, not past it


def test_abandoned_pieces_stop_counting_everywhere() -> None:
    """Shutdown waits on ``pending()``: pieces that never start must leave it, or the
    drain waits for them until its timeout."""
    t = OffsetTracker()
    t.assign([TP, OTHER])
    state = t.track(TP, 0, 3)
    assert state is not None
    t.track(OTHER, 0, 1)
    t.abandon(state, 0, 2)
    assert t.pending() == 2
    assert t.pending([TP]) == 1
    t.done(state, 0)
    assert t.pending() == 1
    assert t.pending([TP]) == 0


def test_abandoning_work_of_a_revoked_partition_changes_nothing() -> None:
    """A revoke already dropped the partition's count; abandoning its stale state later (a
    dispatch that was waiting for a slot) must not subtract it a second time, nor hold the
    partition's new state."""
    t = OffsetTracker()
    t.assign([TP, OTHER])
    old = t.track(TP, 4, 3)
    assert old is not None
    t.track(OTHER, 0, 1)
    t.revoke([TP])
    assert t.pending() == 1
    t.abandon(old, 4, 3)
    assert t.pending() == 1  # OTHER's one piece is still running
    t.assign([TP])  # the partition comes back, offset 4 is fetched again
    new = t.track(TP, 4, 1)
    assert new is not None
    t.abandon(old, 4, 1)  # still the old generation: ignored
    assert t.pending() == 2
    t.done(new, 4)
    assert t.committable([TP]) == {TP: 5}


def test_abandoning_an_offset_that_already_completed_is_ignored() -> None:
    t = OffsetTracker()
    t.assign([TP])
    state = t.track(TP, 0, 1)
    assert state is not None
    t.done(state, 0)
    t.abandon(state, 0, 1)  # nothing of offset 0 is left to abandon
    assert t.pending() == 0
    t.track(TP, 1, 0)
    assert t.committable() == {TP: 2}


def test_a_message_with_no_work_on_an_assigned_partition_is_tracked_not_dropped() -> None:
    """``track`` returns None only for partitions we do not hold (the caller drops those
    records); a complete message of an assigned partition gets its state."""
    t = OffsetTracker()
    t.assign([TP])
    assert t.track(TP, 0, 0) is not None
    assert t.track(OTHER, 0, 0) is None


# --- the commit loop ---------------------------------------------------------------------


class FlakySource(MemorySource):
    """Records commits; the next ``failures`` commits raise ``SourceError`` instead."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.calls = 0

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise SourceError("offset commit failed: the coordinator moved")
        await super().commit(offsets)


def committer() -> tuple[Committer, OffsetTracker, FlakySource, Metrics]:
    tracker = OffsetTracker()
    tracker.assign([TP, OTHER])
    source = FlakySource()
    metrics = Metrics(CollectorRegistry())
    return Committer(tracker, source, metrics), tracker, source, metrics


def commits(metrics: Metrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value("evalstream_offset_commits_total",
                                              {"outcome": outcome})
    return value or 0.0


async def test_a_failed_commit_is_retried_by_the_next_one_and_counted() -> None:
    """A failed commit must not be recorded as done: the next commit carries the same
    positions, else they are never committed and the work is redone after a restart."""
    c, tracker, source, metrics = committer()
    tracker.track(TP, 0, 0)
    source.failures = 1
    await c.commit()  # logged and swallowed, never fatal
    assert source.committed == {}
    assert (commits(metrics, "error"), commits(metrics, "ok")) == (1.0, 0.0)
    await c.commit()
    assert source.committed == {TP: 1}
    assert (commits(metrics, "error"), commits(metrics, "ok")) == (1.0, 1.0)


async def test_a_position_is_committed_once_and_nothing_is_sent_when_nothing_moved() -> None:
    c, tracker, source, metrics = committer()
    await c.commit()
    assert source.calls == 0  # no empty commit, and none counted
    tracker.track(TP, 0, 0)
    await c.commit()
    await c.commit()
    assert source.commits == [{TP: 1}]
    assert commits(metrics, "ok") == 1.0
    tracker.track(TP, 1, 0)
    await c.commit()
    assert source.commits == [{TP: 1}, {TP: 2}]


async def test_commit_of_some_partitions_leaves_the_others_for_later() -> None:
    c, tracker, source, _ = committer()
    tracker.track(TP, 0, 0)
    tracker.track(OTHER, 6, 0)
    await c.commit([OTHER])  # a revoke commits only what it gives away
    assert source.commits == [{OTHER: 7}]
    await c.commit()
    assert source.commits == [{OTHER: 7}, {TP: 1}]


async def test_commit_never_covers_running_work() -> None:
    c, tracker, source, _ = committer()
    state = tracker.track(TP, 0, 1)
    assert state is not None
    tracker.track(TP, 1, 0)
    await c.commit()
    assert source.commits == [{TP: 0}]
    tracker.done(state, 0)
    await c.commit()
    assert source.committed == {TP: 2}


async def test_until_idle_waits_for_the_given_partitions_only() -> None:
    c, tracker, _, _ = committer()
    mine = tracker.track(TP, 0, 2)
    theirs = tracker.track(OTHER, 0, 1)
    assert mine is not None
    assert theirs is not None
    await asyncio.wait_for(c.until_idle([]), 1)  # nothing to wait for
    waiter = asyncio.create_task(c.until_idle([TP]))
    tracker.done(mine, 0)
    c.progressed()
    await asyncio.sleep(0.01)
    assert not waiter.done()  # one piece of offset 0 is still running
    tracker.done(mine, 0)
    c.progressed()
    await asyncio.wait_for(waiter, 1)  # OTHER's work does not hold it
    everything = asyncio.create_task(c.until_idle())
    await asyncio.sleep(0.01)
    assert not everything.done()
    tracker.done(theirs, 0)
    c.progressed()
    await asyncio.wait_for(everything, 1)


async def test_run_commits_periodically_until_cancelled() -> None:
    c, tracker, source, _ = committer()
    task = asyncio.create_task(c.run(0.005))
    tracker.track(TP, 0, 0)
    async with asyncio.timeout(2):
        while source.committed != {TP: 1}:
            await asyncio.sleep(0.005)
    tracker.track(TP, 1, 0)
    async with asyncio.timeout(2):
        while source.committed != {TP: 2}:
            await asyncio.sleep(0.005)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


class _BuggySource(FlakySource):
    """Its next ``failures`` commits raise what no source is declared to raise (a client
    bug, an exception type the client wraps nowhere)."""

    async def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise RuntimeError("client bug")
        await MemorySource.commit(self, offsets)


async def test_an_unexpected_commit_error_is_counted_and_the_loop_goes_on() -> None:
    """The commit loop had no other guard: an exception other than ``SourceError`` ended it
    for the rest of the process, with nothing logged and nothing counted (the
    EvalstreamOffsetCommitErrors alert reads the error count), while intake and results
    went on and committed offsets stood still until the next restart."""
    tracker = OffsetTracker()
    tracker.assign([TP])
    source = _BuggySource()
    metrics = Metrics(CollectorRegistry())
    c = Committer(tracker, source, metrics)
    source.failures = 1
    tracker.track(TP, 0, 0)
    task = asyncio.create_task(c.run(0.005))
    try:
        async with asyncio.timeout(2):
            while source.committed != {TP: 1}:
                assert not task.done(), task
                await asyncio.sleep(0.005)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await task
    assert (commits(metrics, "error"), commits(metrics, "ok")) == (1.0, 1.0)
