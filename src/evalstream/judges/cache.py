"""A bounded, expiring answer cache with in-flight de-duplication.

Keys are hashes of everything that determines an answer (model, endpoint kind, task,
instructions, question, options, data). Identical requests arriving while the first is in
flight wait for its answer instead of sending a second request.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["TTLCache"]

V = TypeVar("V")


class TTLCache(Generic[V]):
    """LRU of at most ``max_size`` entries, each valid for ``ttl_s`` seconds.

    ``max_size`` 0 disables caching (and de-duplication).
    """

    def __init__(self, max_size: int, ttl_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_size = max_size
        self.ttl_s = ttl_s
        self._clock = clock
        self._data: OrderedDict[str, tuple[float, V]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> V | None:
        """The live value under ``key`` (None when absent or expired)."""
        item = self._data.get(key)
        if item is None:
            return None
        expires, value = item
        if expires < self._clock():
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        """Store ``value``; evict the least recently used entry beyond ``max_size``."""
        if self.max_size <= 0:
            return
        self._data[key] = (self._clock() + self.ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_size:
            self._data.popitem(last=False)

    async def get_or_compute(self, key: str,
                             compute: Callable[[], Awaitable[V]]) -> tuple[V, bool]:
        """``(value, hit)``: a cached or in-flight answer, else ``compute()`` (then cached).

        A failed computation is not cached; waiters on it see the same exception. When the
        first caller is cancelled (its deadline, a stop, a revoke), one waiter computes the
        value itself and the other waiters wait for it.
        """
        if self.max_size <= 0:
            return await compute(), False
        while True:
            cached = self.get(key)
            if cached is not None:
                return cached, True
            pending = self._pending.get(key)
            if pending is None:
                break
            try:
                return await asyncio.shield(pending), True
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not pending.cancelled() or (task is not None and task.cancelling()):
                    raise  # this caller was cancelled
                # The first caller gave up: look again. The first waiter to wake computes
                # the value; the others wait for it instead of each sending its own.
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            value = await compute()
        except BaseException as exc:
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
                    future.exception()  # mark retrieved: waiters may be none
            raise
        else:
            self.put(key, value)
            future.set_result(value)
            return value, False
        finally:
            self._pending.pop(key, None)
