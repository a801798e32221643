"""Session windows (``app/sessions.py``): closing on the gap, max_events and capacity with an
injected clock, abandoning on revoke, and merging a conversation without repeated turns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from evalstream.app.offsets import TP, OffsetTracker, PartitionState
from evalstream.app.sessions import (
    Member,
    SessionStore,
    footprint,
    merge_events,
    stand_in_details,
    widest_stand_in_details,
)
from evalstream.config import SessionWindow, load_settings
from evalstream.errors import ConfigError
from evalstream.evaluators.common import conversation_of
from evalstream.events import Message, TraceEvent

TP0: TP = ("traces", 0)
TP1: TP = ("traces", 1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Feed:
    """Members with increasing offsets on tracked partitions."""

    def __init__(self) -> None:
        self.tracker = OffsetTracker()
        self.tracker.assign([TP0, TP1])
        self.next = {TP0: 0, TP1: 0}

    def member(self, event_id: str, session: str = "s1", tp: TP = TP0,
               size: int = 10) -> Member:
        offset = self.next[tp]
        self.next[tp] += 1
        state = self.tracker.track(tp, offset, 1)
        assert isinstance(state, PartitionState)
        event = TraceEvent(event_id=event_id, session_id=session, input=f"q {event_id}",
                           output=f"a {event_id}")
        return Member(event, tp, state, offset, size, size)


def store(max_session_bytes: int = 1_000_000, **window: float) -> SessionStore:
    return SessionStore({"chat": SessionWindow(**window)}, max_session_bytes)  # type: ignore[arg-type]


def add(s: SessionStore, member: Member, now: float) -> list[str]:
    assert member.event.session_id is not None
    return [f"{c.window.session_id}:{c.reason}"
            for c in s.add("chat", member.event.session_id, (), member, now)]


def test_a_session_closes_once_quiet_for_the_gap_since_its_last_event() -> None:
    feed, s = Feed(), store(gap_s=10)
    assert add(s, feed.member("e1"), now=0.0) == []
    assert add(s, feed.member("e2"), now=8.0) == []
    assert s.next_deadline() == 18.0  # from the last event, not the first
    assert s.due(17.9) == []
    (closed,) = s.due(18.0)
    assert closed.reason == "gap"
    assert [m.event.event_id for m in closed.members] == ["e1", "e2"]
    assert closed.details() == {"closed": "gap", "events": 2, "part": 1, "late": False,
                                "event_ids": ["e1", "e2"]}
    assert s.open_count() == 0
    assert s.next_deadline() is None
    # The start-up bound on error results counts the widest stand-in details by hand: a
    # key added to details() must be added there too, or the bound comes out too small.
    assert widest_stand_in_details().keys() == stand_in_details(closed.details()).keys()


def test_sessions_close_independently_in_order_of_quiet() -> None:
    feed, s = Feed(), store(gap_s=10)
    add(s, feed.member("a1", "a"), now=0.0)
    add(s, feed.member("b1", "b"), now=1.0)
    add(s, feed.member("a2", "a"), now=2.0)  # a is active again: b is due first
    assert [c.window.session_id for c in s.due(11.0)] == ["b"]
    assert [c.window.session_id for c in s.due(12.0)] == ["a"]


def test_max_events_closes_at_once_and_the_next_event_starts_part_two() -> None:
    feed, s = Feed(), store(gap_s=10, max_events=3)
    add(s, feed.member("e1"), 0.0)
    add(s, feed.member("e2"), 1.0)
    assert add(s, feed.member("e3"), 2.0) == ["s1:max_events"]
    add(s, feed.member("e4"), 3.0)
    (closed,) = s.due(13.0)
    # A continuation, but not late: the conversation went on past max_events.
    assert (closed.window.part, closed.window.late) == (2, False)
    assert [m.event.event_id for m in closed.members] == ["e4"]


def test_a_session_that_never_goes_quiet_closes_at_max_age() -> None:
    feed, s = Feed(), store(gap_s=10, max_age_s=25)
    for t in range(0, 30, 5):  # an event every 5 s: never quiet for 10
        add(s, feed.member(f"e{t}"), float(t))
        if t == 20:
            assert s.next_deadline() == 25.0
    # Closed at 25 s (the event at 25 came first, in the same window), never later.
    (closed,) = s.due(25.0)
    assert closed.reason == "max_age"
    assert len(closed.members) == 6
    add(s, feed.member("e30"), 30.0)
    assert s.due(39.9) == []
    assert [c.reason for c in s.due(40.0)] == ["gap"]


def test_an_event_after_its_session_was_evaluated_opens_a_late_part() -> None:
    feed, s = Feed(), store(gap_s=10)
    add(s, feed.member("e1"), 0.0)
    assert len(s.due(10.0)) == 1
    add(s, feed.member("e2"), 30.0)
    (closed,) = s.due(40.0)
    assert closed.details()["part"] == 2
    assert closed.details()["late"] is True


def test_a_late_part_abandoned_and_redelivered_is_still_late() -> None:
    feed, s = Feed(), store(gap_s=10)
    add(s, feed.member("e1"), 0.0)
    s.due(10.0)
    add(s, feed.member("e2"), 30.0)
    assert len(s.abandon()) == 1
    add(s, feed.member("e2"), 31.0)
    (closed,) = s.due(41.0)
    assert (closed.window.part, closed.window.late) == (2, True)


def test_the_parts_of_up_to_max_open_closed_sessions_are_remembered() -> None:
    feed, s = Feed(), store(gap_s=10, max_open=2)
    add(s, feed.member("a1", "a"), 0.0)
    add(s, feed.member("b1", "b"), 1.0)
    assert add(s, feed.member("c1", "c"), 2.0) == ["a:capacity"]
    assert len(s.due(100.0)) == 2
    # a closed first: past max_open closed sessions it is forgotten (part 1 again); c is
    # remembered (a late part 2).
    add(s, feed.member("a2", "a"), 200.0)
    add(s, feed.member("c2", "c"), 200.0)
    parts = {c.window.session_id: (c.window.part, c.window.late) for c in s.due(300.0)}
    assert parts == {"a": (1, False), "c": (2, True)}


def test_max_open_closes_the_session_quiet_for_longest_never_drops_it() -> None:
    feed, s = Feed(), store(gap_s=100, max_open=2)
    add(s, feed.member("a1", "a"), 0.0)
    add(s, feed.member("b1", "b"), 1.0)
    add(s, feed.member("a2", "a"), 2.0)
    assert add(s, feed.member("c1", "c"), 3.0) == ["b:capacity"]
    assert s.open_count("chat") == 2
    closed = s.due(1000.0)
    assert sorted(c.window.session_id for c in closed) == ["a", "c"]


def test_an_event_s_footprint_counts_its_text_and_objects() -> None:
    small = TraceEvent(event_id="e1", input="hi")
    assert footprint(small) > 1000  # the objects cost far more than two short texts
    turns = small.model_copy(update={"messages": (msg("user", "x" * 1000),) * 3})
    assert footprint(turns) - footprint(small) > 3 * 1000
    wide = small.model_copy(update={"input": "\u4f60" * 1000})  # stored 2 bytes a char
    assert footprint(wide) - footprint(small) >= 2 * 1000 - 2  # two bytes a character


def test_route_bytes_and_session_bytes_are_bounded() -> None:
    feed, s = Feed(), store(gap_s=100, max_bytes=25)
    add(s, feed.member("a1", "a", size=10), 0.0)
    add(s, feed.member("b1", "b", size=10), 1.0)
    assert add(s, feed.member("c1", "c", size=10), 2.0) == ["a:capacity"]
    feed, s = Feed(), store(max_session_bytes=25, gap_s=100)
    add(s, feed.member("e1", size=10), 0.0)
    add(s, feed.member("e2", size=10), 1.0)
    # One more would pass the per-session limit: the window closes, the event starts part 2.
    assert add(s, feed.member("e3", size=10), 2.0) == ["s1:bytes"]
    assert s.open_count() == 1


def test_byte_bounds_hold_up_to_their_limit_exactly() -> None:
    # The route's max_bytes is what may be held: reaching it closes nothing, passing it
    # closes the quietest session.
    feed, s = Feed(), store(gap_s=100, max_bytes=20)
    assert add(s, feed.member("a1", "a", size=10), 0.0) == []
    assert add(s, feed.member("b1", "b", size=10), 1.0) == []
    assert add(s, feed.member("b2", "b", size=1), 2.0) == ["a:capacity"]
    assert s.open_count() == 1
    # Likewise a session holds exactly max_message_bytes; one byte more starts a new part.
    feed, s = Feed(), store(max_session_bytes=20, gap_s=100)
    assert add(s, feed.member("e1", size=10), 0.0) == []
    assert add(s, feed.member("e2", size=10), 1.0) == []
    assert add(s, feed.member("e3", size=1), 2.0) == ["s1:bytes"]


def test_routes_are_windowed_apart_and_the_soonest_deadline_is_next() -> None:
    feed = Feed()
    s = SessionStore({"chat": SessionWindow(gap_s=10), "voice": SessionWindow(gap_s=30)},
                     1_000_000)
    s.add("voice", "s1", (), feed.member("v1"), 0.0)
    s.add("chat", "s1", (), feed.member("c1"), 1.0)  # same session id, another route
    assert (s.open_count("chat"), s.open_count("voice"), s.open_count()) == (1, 1, 2)
    assert s.next_deadline() == 11.0  # chat's, though voice's window opened first
    assert [c.window.route for c in s.due(11.0)] == ["chat"]
    assert s.next_deadline() == 30.0


def test_revoke_abandons_only_the_sessions_of_the_revoked_partitions() -> None:
    feed, s = Feed(), store(gap_s=10)
    add(s, feed.member("a1", "a", tp=TP0), 0.0)
    add(s, feed.member("b1", "b", tp=TP1), 0.0)
    add(s, feed.member("c1", "c", tp=TP1), 0.0)
    add(s, feed.member("c2", "c", tp=TP0), 0.0)  # spans both: it goes whole
    gone = s.abandon([TP0])
    assert sorted(w.session_id for w in gone) == ["a", "c"]
    assert [c.window.session_id for c in s.due(10.0)] == ["b"]
    # Abandoned is not evaluated: a redelivered event opens part 1 again, not a late part.
    add(s, feed.member("a1", "a", tp=TP0), 20.0)
    (closed,) = s.due(30.0)
    assert closed.details()["part"] == 1
    assert s.abandon() == []


def test_abandoned_members_hold_their_partition_uncommitted() -> None:
    feed, s = Feed(), store(gap_s=10)
    member = feed.member("e1")
    add(s, member, 0.0)
    for window in s.abandon():
        for m in window.members:
            feed.tracker.abandon(m.state, m.offset, 1)
    assert feed.tracker.pending() == 0  # a revoke does not wait for it...
    assert feed.tracker.committable() == {TP0: 0}  # ...and never commits past it


# --- merging ----------------------------------------------------------------------------


def turns(event: TraceEvent) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in conversation_of(event)]


def msg(role: str, content: str) -> Message:
    return Message(role=role, content=content)


def test_events_resending_the_history_merge_without_repeated_turns() -> None:
    u1, a1, u2, a2, u3 = (msg("user", "hi"), msg("assistant", "hello"),
                          msg("user", "refund?"), msg("assistant", "sure"),
                          msg("user", "when?"))
    events = [
        TraceEvent(event_id="e1", messages=(msg("system", "be nice"), u1), input="hi",
                   output="hello"),
        TraceEvent(event_id="e2", messages=(u1, a1, u2), input="refund?", output="sure"),
        TraceEvent(event_id="e3", messages=(u1, a1, u2, a2, u3), input="when?",
                   output="tomorrow"),
    ]
    merged = merge_events("s1", events)
    expected = [("user", "hi"), ("assistant", "hello"), ("user", "refund?"),
                ("assistant", "sure"), ("user", "when?"), ("assistant", "tomorrow")]
    assert turns(merged) == expected
    assert (merged.input, merged.output, merged.session_id) == ("when?", "tomorrow", "s1")
    # Arrival order does not matter when events carry their history: the longest wins.
    assert turns(merge_events("s1", events[::-1])) == expected


def test_per_turn_events_become_alternating_turns_in_time_order() -> None:
    events = [TraceEvent(event_id=f"e{i}", input=f"q{i}", output=f"a{i}",
                         timestamp=T0 + timedelta(seconds=i)) for i in range(3)]
    repeat = TraceEvent(event_id="e3", input="q0", output="a0",
                        timestamp=T0 + timedelta(seconds=3))
    merged = merge_events("s1", [events[2], repeat, events[0], events[1], events[0]])
    # Sorted by time; the duplicate delivery of e0 counted once; a repeated question kept.
    assert turns(merged) == [("user", "q0"), ("assistant", "a0"), ("user", "q1"),
                             ("assistant", "a1"), ("user", "q2"), ("assistant", "a2"),
                             ("user", "q0"), ("assistant", "a0")]
    assert merged.timestamp == T0 + timedelta(seconds=3)


def test_separate_input_and_output_events_alternate() -> None:
    events = [TraceEvent(event_id="1", input="hi"), TraceEvent(event_id="2", output="hello"),
              TraceEvent(event_id="3", input="bye"), TraceEvent(event_id="4", output="ciao")]
    merged = merge_events("s", events)
    assert turns(merged) == [("user", "hi"), ("assistant", "hello"), ("user", "bye"),
                             ("assistant", "ciao")]
    assert (merged.input, merged.output) == ("bye", "ciao")


def test_regenerated_answers_and_trailing_windows_of_history() -> None:
    u1, a1 = msg("user", "hi"), msg("assistant", "hello")
    first = TraceEvent(event_id="e1", messages=(u1,), input="hi", output="hello")
    again = TraceEvent(event_id="e2", messages=(u1,), input="hi", output="hey there")
    merged = merge_events("s", [first, again])
    assert turns(merged) == [("user", "hi"), ("assistant", "hello"),
                             ("assistant", "hey there")]
    # A client sending only the last turns of the history: joined on the overlap.
    u2, a2 = msg("user", "price?"), msg("assistant", "$5")
    window = TraceEvent(event_id="e3", messages=(a1, u2, a2, msg("user", "ok")), input="ok",
                        output="bye")
    assert turns(merge_events("s", [first, window])) == [
        ("user", "hi"), ("assistant", "hello"), ("user", "price?"), ("assistant", "$5"),
        ("user", "ok"), ("assistant", "bye")]


def test_events_without_any_turn_merge_into_an_event_without_turns() -> None:
    bare = TraceEvent(event_id="e1", session_id="s", attributes={"model": "m"})
    merged = merge_events("s", [bare, bare.model_copy(update={"event_id": "e2"})])
    assert (merged.messages, merged.input, merged.output) == ((), None, None)
    assert merged.attributes == {"model": "m"}


def test_the_last_exchange_is_read_from_the_merged_turns() -> None:
    # Ending on a user turn (a question not answered yet): input is it, output None.
    asked = TraceEvent(event_id="e2", messages=(msg("user", "hi"), msg("assistant", "hello"),
                                                msg("user", "and?")))
    merged = merge_events("s", [TraceEvent(event_id="e1", input="hi", output="hello"), asked])
    assert (merged.input, merged.output) == ("and?", None)
    # An answer alone: no input.
    merged = merge_events("s", [TraceEvent(event_id="e1", output="hello")])
    assert (merged.input, merged.output) == (None, "hello")


def test_members_without_timestamps_keep_the_arrival_order() -> None:
    # Time order needs every member's time; one missing, arrival order is all there is.
    late = TraceEvent(event_id="e1", input="q1", output="a1", timestamp=T0 + timedelta(1))
    unknown = TraceEvent(event_id="e2", input="q2", output="a2")
    early = TraceEvent(event_id="e3", input="q3", output="a3", timestamp=T0)
    merged = merge_events("s", [late, unknown, early])
    assert [c for _, c in turns(merged)] == ["q1", "a1", "q2", "a2", "q3", "a3"]


def test_the_merged_id_depends_on_the_session_and_its_members_only() -> None:
    a = TraceEvent(event_id="a", input="x", output="y", attributes={"model": "m1"})
    b = TraceEvent(event_id="b", input="x2", output="y2", attributes={"model": "m2"})
    one = merge_events("s", [a, b])
    assert one.event_id == merge_events("s", [b, a]).event_id  # arrival order aside
    assert one.event_id != merge_events("s", [a]).event_id
    assert one.event_id != merge_events("t", [a, b]).event_id
    assert one.attributes == {"model": "m2"}  # the later member wins
    # Other fields are the latest member's that has one.
    prompted = a.model_copy(update={"system_prompt": "be brief", "app": "shop"})
    merged = merge_events("s", [prompted, b])
    assert (merged.system_prompt, merged.app) == ("be brief", "shop")
    later = b.model_copy(update={"system_prompt": "be kind"})
    assert merge_events("s", [prompted, later]).system_prompt == "be kind"


def test_a_session_route_needs_session_id_sampling() -> None:
    route = {"name": "chat", "session": {"gap_s": 5},
             "evaluators": [{"evaluator": "refusal"}]}
    # At rate 1 nothing is sampled out: every key keeps a session whole.
    assert load_settings(None, routes=[route]).routes[0].session == SessionWindow(gap_s=5)
    for below in ({"sampling": {"rate": 0.5}}, {"routes": [{**route, "sample_rate": 0.5}]},
                  {"routes": [{**route, "evaluators": [{"evaluator": "refusal",
                                                        "sample_rate": 0.5}]}]}):
        with pytest.raises(ConfigError,
                           match=r"routes\[0\] \(chat\)\.session.*sampling\.key"):
            load_settings(None, **{"routes": [route], **below})
    settings = load_settings(None, routes=[route], sampling={"key": "session_id"})
    assert settings.routes[0].session == SessionWindow(gap_s=5)
    with pytest.raises(ConfigError, match="gap_s"):
        load_settings(None, routes=[{**route, "session": {"gap_s": 0}}],
                      sampling={"key": "session_id"})
