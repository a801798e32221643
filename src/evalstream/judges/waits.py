"""A judge's waits that a stop or a revoke cancels instead of waiting them out.

A request may wait before anything of it is sent: for room under its spend cap
(``spend.py``), at the judge-wide pause after rate limiting, at an open circuit breaker, at
a token bucket, for a connection slot (``max_concurrency``), or in its backoff before a
retry (``openai_send.py``). Each wait holds the evaluation's slot and may last up to the
request's deadline, or, for the spend cap, hours. A stop's drain or a revoke should not
wait for them: such a wait is held in the judge's :class:`StoppableWaits`, whose
:meth:`StoppableWaits.stop` cancels it. The evaluation is then left uncommitted and
redelivered (to the partition's next owner after a revoke).

A wait that would return at once is not held: a stop lets the request go on, and the drain
finishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterator
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["WAIT_SCOPE", "StoppableWaits"]

_T = TypeVar("_T")

#: What a waiting request is waiting for, set by whoever runs it (the worker: the
#: evaluation's partition assignment, an object a rebalance replaces), so that
#: :meth:`StoppableWaits.stop` can cancel the waits of a revoked partition only, and refuse
#: the waits that start after it. Tasks an evaluation starts inherit it.
WAIT_SCOPE: ContextVar[Hashable | None] = ContextVar("evalstream_wait_scope", default=None)


class StoppableWaits:
    """The waits of one judge's requests, for a stop or a revoke to cancel."""

    def __init__(self) -> None:
        # The tasks in a wait, with the scope each waits in.
        self._tasks: dict[asyncio.Task[object], Hashable | None] = {}
        self._stopping = False
        # The scopes already given up: an evaluation of a revoked partition that comes to
        # wait later must not wait for work now someone else's. Weak, so a scope is
        # forgotten once nothing of it runs any more.
        self._stopped: weakref.WeakSet[Hashable] = weakref.WeakSet()

    def __len__(self) -> int:
        """Requests in a wait now."""
        return len(self._tasks)

    @contextlib.contextmanager
    def holding(self) -> Iterator[None]:
        """Hold the current task (with its :data:`WAIT_SCOPE`) for the block, so that
        :meth:`stop` can cancel it.

        Raises:
            asyncio.CancelledError: at once, when stopping or when the scope was given up.
        """
        task = asyncio.current_task()
        scope = WAIT_SCOPE.get()
        if self._stopping or task is None or self._given_up(scope):
            raise asyncio.CancelledError
        self._tasks[task] = scope
        try:
            yield
        finally:
            self._tasks.pop(task, None)

    async def wait(self, wait: Callable[[], Awaitable[_T]]) -> _T:
        """Await ``wait()`` held (see :meth:`holding`).

        Raises:
            asyncio.CancelledError: the worker is stopping, or this wait's scope was given
                up (:meth:`stop`).
        """
        with self.holding():
            return await wait()

    def stop(self, scopes: Collection[Hashable] | None = None) -> None:
        """Cancel the waits: all of them and any that would start (``scopes`` None: the
        worker is stopping), or those whose :data:`WAIT_SCOPE` is in ``scopes`` and any that
        would start in them (partitions given up: a scope names one assignment, never
        assigned again).

        Only scopes that can be weakly referenced are remembered for later waits (held
        weakly, so memory stays bounded); others (e.g. a bare partition, which may be
        assigned again) cancel only the waits already started."""
        if scopes is None:
            self._stopping = True
        else:
            for scope in scopes:
                with contextlib.suppress(TypeError):
                    self._stopped.add(scope)
        for task, scope in list(self._tasks.items()):
            if scopes is None or scope in scopes:
                task.cancel()

    def _given_up(self, scope: Hashable | None) -> bool:
        # A WeakSet answers False for what cannot be weakly referenced (never remembered).
        return scope is not None and scope in self._stopped
