"""Session windows: a route's events of one conversation, held and evaluated once, merged.

Pure (no I/O, no clock of its own: every call is given ``now``), so it is tested with an
injected clock; the asyncio part (the timer, running a closed session's evaluations, the
offsets of its members) is ``app/session_path.py``.

On a route with ``session:``, each event with a ``session_id`` joins the open window of
(route, session_id). A window closes, and is handed back to be evaluated once as a whole,
when it has been quiet for ``gap_s`` (reason ``gap``), when it reaches ``max_events``
(``max_events``), when it has been open for ``max_age_s`` (``max_age``: this bounds how
long it holds its partition's commits, however steadily the conversation goes on), when
the route's ``max_open`` sessions or ``max_bytes`` are reached and it is the one quiet for
longest (``capacity``), or when one more event would take it past the per-session byte
limit (``bytes``). A window is never dropped: :meth:`SessionStore.abandon`
hands open windows back (a revoke or a stop) so their members' offsets stay uncommitted.

An event arriving after its session closed opens a new window, a continuation: its
result's ``details.session.part`` counts the parts (this process remembers the last part of
up to ``max_open`` closed sessions per route), and ``late`` is true when the previous part
closed on the gap (the conversation was thought over), false when it was cut short.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from evalstream.app.bindings import Planned
from evalstream.app.offsets import TP, PartitionState
from evalstream.config import SessionWindow
from evalstream.evaluators.common import conversation_of
from evalstream.events import Message, TraceEvent, stable_hash

__all__ = ["REASONS", "Closed", "Member", "SessionStore", "Window", "footprint",
           "merge_events", "stand_in_details", "widest_stand_in_details"]

#: Why a window closed (``evalstream_sessions_closed_total``'s reason label).
REASONS = ("gap", "max_events", "max_age", "capacity", "bytes", "abandoned")


def stand_in_details(session: Mapping[str, Any]) -> dict[str, Any]:
    """``details.session`` (:meth:`Closed.details`) as the error result standing in for a
    session's refused result carries it: without the members' ids, which may be what made
    that result too large."""
    return {k: v for k, v in session.items() if k != "event_ids"}


def widest_stand_in_details() -> dict[str, Any]:
    """The largest :func:`stand_in_details` JSON can hold (the longest reason, counts at
    the longest 64-bit number, ``false``), for the start-up bound on error results."""
    return {"closed": max(REASONS, key=len), "events": -(2**63), "part": -(2**63),
            "late": False}


# What a held event costs in memory besides its text, measured with tracemalloc on CPython
# 3.11 (flat JSON and history-carrying events): the model with its member and window
# entries, one chat turn's model, one attribute's entry (its key often shared), one str.
_EVENT_BYTES = 1792
_TURN_BYTES = 480
_ATTRIBUTE_BYTES = 80
_STR_BYTES = 56


def _text(text: str | None) -> int:
    if text is None:
        return 0
    # A non-ASCII str stores 2 (or 4) bytes a character; ``isascii`` reads a flag.
    return _STR_BYTES + (len(text) if text.isascii() else 2 * len(text))


def footprint(event: TraceEvent) -> int:
    """About the bytes ``event`` holds in memory once decoded (what ``max_bytes`` counts).

    Its message's bytes were no measure of that: a 100-byte message decodes to ~1 KB of
    objects, a 3.5 KB history-carrying one to ~17 KB.
    """
    size = (_EVENT_BYTES + _text(event.event_id) + _text(event.trace_id)
            + _text(event.span_id) + _text(event.session_id) + _text(event.app)
            + _text(event.system_prompt) + _text(event.input) + _text(event.output)
            + _text(event.reference))
    for turn in event.messages:
        size += _TURN_BYTES + _text(turn.role) + _text(turn.content)
    for key, value in event.attributes.items():
        size += _ATTRIBUTE_BYTES + len(key) + len(value)
    for document in event.context:
        size += _text(document)
    return size


@dataclass(slots=True)
class Member:
    """One event held in a window, with the offset it completes once the session is done."""

    event: TraceEvent
    tp: TP
    state: PartitionState
    offset: int
    #: Its share of its message's bytes (what the per-session bound counts).
    size: int
    #: About what it holds in memory (:func:`footprint`: what the route's ``max_bytes``
    #: counts).
    held: int


@dataclass(slots=True)
class Window:
    """An open session of one route."""

    route: str
    session_id: str
    #: The evaluations of the route (the same for every member: sampled on session_id).
    planned: tuple[Planned, ...]
    part: int
    late: bool
    members: list[Member] = field(default_factory=list)
    #: Its members' message bytes (bounded by ``worker.max_message_bytes``).
    size: int = 0
    #: Its members' memory (counted against the route's ``max_bytes``).
    held: int = 0
    #: ``now`` of its last event.
    last: float = 0.0
    #: ``now`` of its first event.
    opened: float = 0.0


@dataclass(frozen=True, slots=True)
class Closed:
    """A closed window, to be evaluated once on :meth:`event`."""

    window: Window
    reason: str

    @property
    def members(self) -> list[Member]:
        """Every held event with its offset (duplicates included: each holds an offset)."""
        return self.window.members

    @property
    def planned(self) -> tuple[Planned, ...]:
        """The route's evaluations."""
        return self.window.planned

    def event(self) -> TraceEvent:
        """The conversation as one event (:func:`merge_events`)."""
        return merge_events(self.window.session_id, [m.event for m in self.members])

    def details(self) -> dict[str, Any]:
        """What every result of the session carries under ``details.session``: why it
        closed, its part (and whether it came late), its members' ids in time order."""
        ids = [e.event_id for e in _ordered([m.event for m in self.members])]
        return {"closed": self.reason, "events": len(ids), "part": self.window.part,
                "late": self.window.late, "event_ids": ids}


class _Route:
    __slots__ = ("by_age", "bytes", "config", "open", "parts")

    def __init__(self, config: SessionWindow) -> None:
        self.config = config
        #: Open windows by session id, the one quiet for longest first.
        self.open: OrderedDict[str, Window] = OrderedDict()
        #: The same windows, the one opened first first (insertion order).
        self.by_age: dict[str, Window] = {}
        self.bytes = 0
        #: Closed sessions' last (part, reason), the most recent last; bounded by max_open.
        self.parts: OrderedDict[str, tuple[int, str]] = OrderedDict()


class SessionStore:
    """The open windows of every session route.

    Args:
        windows: Each session route's settings, by route name.
        max_session_bytes: The most bytes one window holds (``worker.max_message_bytes``).
    """

    def __init__(self, windows: Mapping[str, SessionWindow], max_session_bytes: int) -> None:
        self._routes = {name: _Route(config) for name, config in windows.items()}
        self._max_session_bytes = max_session_bytes

    @property
    def routes(self) -> frozenset[str]:
        """The names of the routes with a session window."""
        return frozenset(self._routes)

    def soonest(self, route: str) -> float:
        """The soonest a window of ``route`` opened now can be due (gap or max age)."""
        config = self._routes[route].config
        return min(config.gap_s, config.max_age_s)

    def open_count(self, route: str | None = None) -> int:
        """Open windows of ``route`` (every route when None)."""
        if route is not None:
            return len(self._routes[route].open)
        return sum(len(r.open) for r in self._routes.values())

    def add(self, route: str, session_id: str, planned: tuple[Planned, ...], member: Member,
            now: float) -> list[Closed]:
        """Hold ``member`` in its session's window; return the windows this closed."""
        state = self._routes[route]
        closed: list[Closed] = []
        window = state.open.get(session_id)
        if (window is not None and window.members
                and window.size + member.size > self._max_session_bytes):
            closed.append(self._close(state, window, "bytes"))
            window = None
        if window is None:
            while len(state.open) >= state.config.max_open:
                closed.append(self._close(state, next(iter(state.open.values())), "capacity"))
            # Read, not taken: if this part is abandoned, its redelivery is still part n+1.
            part, reason = state.parts.get(session_id, (0, ""))
            window = Window(route, session_id, planned, part + 1, late=reason == "gap",
                            opened=now)
            state.open[session_id] = window
            state.by_age[session_id] = window
        else:
            state.open.move_to_end(session_id)
        window.members.append(member)
        window.size += member.size
        window.held += member.held
        window.last = now
        state.bytes += member.held
        while state.bytes > state.config.max_bytes and state.open:
            closed.append(self._close(state, next(iter(state.open.values())), "capacity"))
        if (state.open.get(session_id) is window
                and len(window.members) >= state.config.max_events):
            closed.append(self._close(state, window, "max_events"))
        return closed

    def due(self, now: float) -> list[Closed]:
        """Close and return the windows quiet for their route's ``gap_s`` by ``now``, and
        those open for its ``max_age_s``."""
        closed: list[Closed] = []
        for state in self._routes.values():
            gap, windows = state.config.gap_s, state.open
            while windows:
                quietest = next(iter(windows.values()))
                if quietest.last + gap > now:
                    break
                closed.append(self._close(state, quietest, "gap"))
            max_age, by_age = state.config.max_age_s, state.by_age
            while by_age:
                oldest = next(iter(by_age.values()))
                if oldest.opened + max_age > now:
                    break
                closed.append(self._close(state, oldest, "max_age"))
        return closed

    def next_deadline(self) -> float | None:
        """When the next window goes quiet or grows too old (None: none open)."""
        deadlines = [min(next(iter(s.open.values())).last + s.config.gap_s,
                         next(iter(s.by_age.values())).opened + s.config.max_age_s)
                     for s in self._routes.values() if s.open]
        return min(deadlines) if deadlines else None

    def abandon(self, tps: Collection[TP] | None = None) -> list[Window]:
        """Take out, unevaluated, the open windows holding a member of ``tps`` (all when
        None): their partitions are revoked, or the worker stops. A window spanning several
        partitions goes whole (see the README: key messages by session for one partition);
        aiokafka's rebalances are eager (every partition is revoked at once), so no member
        of it is left on a partition kept, where it would hold the commits."""
        out: list[Window] = []
        tps = None if tps is None else set(tps)
        for state in self._routes.values():
            gone = [w for w in state.open.values()
                    if tps is None or any(m.tp in tps for m in w.members)]
            for window in gone:
                self._remove(state, window)
            out.extend(gone)
        return out

    @staticmethod
    def _remove(state: _Route, window: Window) -> None:
        del state.open[window.session_id]
        del state.by_age[window.session_id]
        state.bytes -= window.held

    def _close(self, state: _Route, window: Window, reason: str) -> Closed:
        self._remove(state, window)
        parts = state.parts
        parts[window.session_id] = (window.part, reason)
        parts.move_to_end(window.session_id)
        if len(parts) > state.config.max_open:
            parts.popitem(last=False)
        return Closed(window, reason)


# --- merging ---------------------------------------------------------------------------


def _unique(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """The events once each by event id (a producer's retry sends one twice), in order."""
    seen: set[str] = set()
    out = []
    for event in events:
        if event.event_id not in seen:
            seen.add(event.event_id)
            out.append(event)
    return out


def _aware(stamp: datetime) -> datetime:
    """Naive times are UTC (as the pipeline reads them), so both kinds sort together."""
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _time(event: TraceEvent) -> datetime:
    stamp = event.timestamp
    return _aware(stamp) if stamp is not None else datetime.min.replace(tzinfo=UTC)


def _ordered(events: Sequence[TraceEvent]) -> list[TraceEvent]:
    """Unique events in time order: by timestamp when every one has one (ties and the rest
    in arrival order), else in arrival order."""
    unique = _unique(events)
    if all(e.timestamp is not None for e in unique):
        unique.sort(key=_time)
    return unique


def _extend(turns: list[Message], more: Sequence[Message]) -> None:
    """Add an event's turns (it carries its history) to the conversation, without repeats.

    An event whose history starts as the conversation does adds what follows the shared
    start: a history that extends the conversation adds its new turns, a shorter one (an
    earlier call, or a retry) nothing, and one that diverged (an edited or regenerated
    turn) its own branch after the turns already seen. An event carrying only a trailing
    window of the history adds what follows the longest overlap of the conversation's end
    with its start.
    """
    common = 0
    for mine, theirs in zip(turns, more, strict=False):
        if mine != theirs:
            break
        common += 1
    if common or not turns:
        turns.extend(more[common:])
        return
    for k in range(min(len(turns), len(more)), 0, -1):
        if turns[-k:] == list(more[:k]):
            turns.extend(more[k:])
            return
    turns.extend(more)


def merge_events(session_id: str, events: Sequence[TraceEvent]) -> TraceEvent:
    """The session's events as one conversation event, in time order.

    Turns are read as evaluators read them (``conversation_of``: user and assistant turns,
    the input and output after the history unless already there). An event that carries
    its history (``messages``) is merged without repeating turns (:func:`_extend`); one
    that carries a single exchange (input and output only) adds it as new turns, so a user
    saying the same thing twice is kept twice. The merged event's ``messages`` hold every
    turn; its ``input``/``output`` are the last exchange, its other fields the latest
    member's (attributes merged, later ones winning). Its ``event_id`` is derived from the
    session id and its members' ids, so the same window rebuilt after a redelivery gets the
    same ``result_id``s.
    """
    ordered = _ordered(events)
    if not ordered:
        raise ValueError("a session has at least one event")
    turns: list[Message] = []
    for event in ordered:
        mine = conversation_of(event)
        if event.messages:
            _extend(turns, mine)
        else:
            turns.extend(mine)
    last = ordered[-1]
    text_in, text_out = last.input, last.output
    if turns and turns[-1].role == "assistant":
        text_out = turns[-1].content
        text_in = turns[-2].content if len(turns) > 1 and turns[-2].role == "user" else None
    elif turns:
        text_in, text_out = turns[-1].content, None
    attributes: dict[str, str] = {}
    for event in ordered:
        attributes.update(event.attributes)
    ids = sorted(e.event_id for e in ordered)
    return TraceEvent(
        event_id=f"session-{stable_hash(session_id, ids)}",
        trace_id=last.trace_id,
        session_id=session_id,
        app=next((e.app for e in reversed(ordered) if e.app is not None), None),
        system_prompt=next((e.system_prompt for e in reversed(ordered)
                            if e.system_prompt is not None), None),
        messages=tuple(turns),
        input=text_in,
        output=text_out,
        context=last.context,
        reference=next((e.reference for e in reversed(ordered) if e.reference is not None),
                       None),
        attributes=attributes,
        timestamp=max((e.timestamp for e in ordered if e.timestamp is not None),
                      key=_aware, default=None),
    )
