"""Commit watermarks: commits never cover unfinished work, whatever the completion order."""

from __future__ import annotations

from evalstream.app.offsets import OffsetTracker

TP = ("traces", 0)


def test_commit_stops_at_the_lowest_unfinished_offset() -> None:
    t = OffsetTracker()
    t.assign([TP])
    for offset in range(5):
        state = t.track(TP, offset, 1)
    assert state is not None
    assert t.committable() == {TP: 0}
    t.done(state, 3)
    t.done(state, 1)
    assert t.committable() == {TP: 0}  # 0 is still running
    t.done(state, 0)
    assert t.committable() == {TP: 2}  # 0 and 1 done, 2 not
    t.done(state, 2)
    t.done(state, 4)
    assert t.committable() == {TP: 5}
    assert t.pending() == 0


def test_messages_with_several_results_complete_on_the_last() -> None:
    t = OffsetTracker()
    t.assign([TP])
    state = t.track(TP, 10, 3)
    assert state is not None
    t.done(state, 10)
    t.done(state, 10)
    assert t.committable() == {TP: 10}
    assert t.pending([TP]) == 1
    t.done(state, 10)
    assert t.committable() == {TP: 11}


def test_skipped_messages_complete_at_once_but_not_past_running_work() -> None:
    t = OffsetTracker()
    t.assign([TP])
    t.track(TP, 0, 0)
    t.track(TP, 1, 0)
    assert t.committable() == {TP: 2}
    state = t.track(TP, 2, 1)
    assert state is not None
    t.track(TP, 3, 0)  # skipped, but behind running offset 2
    assert t.committable() == {TP: 2}
    t.done(state, 2)
    assert t.committable() == {TP: 4}


def test_unchanged_positions_are_not_committed_twice() -> None:
    t = OffsetTracker()
    t.assign([TP])
    t.track(TP, 0, 0)
    positions = t.committable()
    t.committed(positions)
    assert t.committable() == {}
    t.track(TP, 1, 0)
    assert t.committable() == {TP: 2}


def test_revoked_partitions_are_forgotten() -> None:
    other = ("traces", 1)
    t = OffsetTracker()
    t.assign([TP, other])
    state = t.track(TP, 0, 2)
    assert state is not None
    t.track(other, 0, 1)
    assert t.pending() == 3
    t.revoke([TP])
    assert not t.is_assigned(TP)
    assert t.pending() == 1
    t.done(state, 0)  # late completion of revoked work is ignored
    assert t.pending() == 1
    assert t.committable() == {other: 0}
    assert t.committable([TP]) == {}
    assert t.track(TP, 1, 1) is None  # records of a partition we do not hold are dropped


def test_work_from_before_a_reassignment_cannot_complete_the_new_state() -> None:
    t = OffsetTracker()
    t.assign([TP])
    old = t.track(TP, 10, 2)
    assert old is not None
    t.revoke([TP])
    t.assign([TP])  # the same partition comes back; offset 10 is fetched again
    new = t.track(TP, 10, 2)
    assert new is not None
    t.done(old, 10)
    t.done(old, 10)  # the old generation's results do not count for the new one
    assert t.committable() == {TP: 10}
    t.done(new, 10)
    t.done(new, 10)
    assert t.committable() == {TP: 11}


def test_abandoned_work_is_not_waited_for_and_never_committed_past() -> None:
    t = OffsetTracker()
    t.assign([TP])
    state = t.track(TP, 0, 1)
    assert state is not None
    t.track(TP, 1, 3)  # three evaluations; one started, two will never start
    t.abandon(state, 1, 2)
    assert t.pending([TP]) == 2  # offset 0's one, offset 1's started one
    t.done(state, 0)
    t.done(state, 1)
    assert t.pending([TP]) == 0
    assert t.committable() == {TP: 1}  # offset 1 is redelivered, never skipped
    t.track(TP, 2, 0)
    assert t.committable() == {TP: 1}


def test_unfinished_is_where_the_work_not_done_starts() -> None:
    # What the lag gauge counts from: the position is past every fetched message.
    t = OffsetTracker()
    assert t.unfinished(TP) is None  # not assigned
    t.assign([TP])
    assert t.unfinished(TP) is None  # nothing taken: the source's position tells
    t.fetched(TP, 10)  # a batch from 10 on, not handled yet (intake waits for a slot)
    assert t.unfinished(TP) == 10
    assert t.committable() == {}  # for lag only: nothing is committed for it
    assert not t.taken(TP)  # nor does it count as taken (``run --until-caught-up``)
    state = t.track(TP, 10, 1)
    assert state is not None
    t.fetched(TP, 30)  # a later batch: handling has started, so tracking tells
    t.advance(TP, 20)  # 11..19 produced no work
    assert t.unfinished(TP) == 10  # in flight
    t.done(state, 10)
    assert t.unfinished(TP) == 20  # all done up to the last handled
    t.revoke([TP])
    t.assign([TP])
    assert t.unfinished(TP) is None  # fresh state after a reassignment
