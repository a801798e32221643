"""Dead-lettering the messages the message path cannot decode.

A message that cannot be decoded (``DecodeError``) is logged (where and why, never its
content; a flood of them is not: a burst per reason, then one line a second saying how
many were left out, as ``evalstream_dead_letters_total`` counts each), tracked as one
piece of work at its offset and published to the dead-letter topic with its reason; its
offset completes once the broker acknowledged that. Publishing runs as tasks of its own,
at most ``_DEAD_LETTER_CONCURRENCY`` at once (apart from the ``worker.max_in_flight``
slots of evaluations), among the message path's tasks so that its drain and cancel reach
them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import structlog

from evalstream.app.commits import Committer
from evalstream.app.offsets import TP, OffsetTracker, PartitionState
from evalstream.app.outputs import Outputs
from evalstream.events import Record
from evalstream.logging import LogLimits, get_logger

__all__ = ["DeadLetters"]

log = get_logger(__name__)

_DEAD_LETTER_CONCURRENCY = 64


class DeadLetters:
    """Publishes undecodable messages to the dead-letter topic, tracking their offsets.

    Args:
        outputs: Where dead letters are published.
        tracker: Which offsets are complete.
        committer: Told when work completes.
        fail: Called when a dead letter cannot be made durable (the worker then stops).
        tasks: The message path's tasks under way; publishing tasks join them.
    """

    def __init__(self, *, outputs: Outputs, tracker: OffsetTracker, committer: Committer,
                 fail: Callable[[BaseException], None],
                 tasks: set[asyncio.Task[None]]) -> None:
        self._outputs = outputs
        self._tracker = tracker
        self._committer = committer
        self._fail = fail
        self._tasks = tasks
        self._dl_slots = asyncio.Semaphore(_DEAD_LETTER_CONCURRENCY)
        #: Per reason (a small fixed set), so a flood of one hides no other.
        self._log_limits: LogLimits[str] = LogLimits()

    async def send(self, record: Record, tp: TP, reason: str, error: str) -> None:
        """Track ``record`` and start publishing it (waiting for a dead-letter slot)."""
        if (fields := self._log_limits.fields(reason)) is not None:
            with structlog.contextvars.bound_contextvars(
                    topic=record.topic, partition=record.partition, offset=record.offset):
                log.warning("dead_letter", reason=reason, error=error,
                            size=len(record.value) if record.value is not None else None,
                            **fields)
        state = self._tracker.track(tp, record.offset, 1)
        if state is None:
            return
        try:
            await self._dl_slots.acquire()
        except asyncio.CancelledError:  # intake ended first: as in ``MessagePath._start``
            self._tracker.abandon(state, record.offset, 1)
            self._committer.progressed()
            raise
        task = asyncio.create_task(self._publish(record, state, reason, error))
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._finished, state, record.offset))

    def _finished(self, state: PartitionState, offset: int, task: asyncio.Task[None]) -> None:
        """A publishing task ended, however: its dead-letter slot is freed, and when it was
        cancelled (the drain's deadline, a close) its piece is abandoned, so a revoke does
        not wait for it and the message is redelivered. In a done callback, as the message
        path's evaluations do: a task cancelled before its first step never runs its body,
        and the callback runs exactly once either way."""
        self._tasks.discard(task)
        self._dl_slots.release()
        if task.cancelled():
            self._tracker.abandon(state, offset, 1)
            self._committer.progressed()

    async def _publish(self, record: Record, state: PartitionState,
                       reason: str, error: str) -> None:
        try:
            await self._outputs.dead_letter(record, reason, error)
        except Exception as exc:  # SinkError, or a bug: stop rather than hold the offset
            self._fail(exc)
            return
        self._tracker.done(state, record.offset)
        self._committer.progressed()
