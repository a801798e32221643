"""The steps of the worker's stop past the drain, within one shared budget.

``Worker`` (``app/worker.py``) stops in three steps: end intake, drain in-flight work, then
finish. The finishing steps are here: the observers' last step, flushing the producer, the
final commit, and closing each client, every one within what is left of one budget
(:func:`close_budget`). With the broker unreachable each would otherwise wait out its own
timeout (aiokafka retries commits forever); what is cut short is uncommitted, so
redelivered, never lost. So is :func:`stop_judge_waits`, with which both a stop and a
revoke cancel the evaluations waiting at a judge's spend cap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Sequence

from evalstream.app.commits import Committer
from evalstream.app.waits import SharedDeadline
from evalstream.errors import SinkError
from evalstream.judges.base import Judge
from evalstream.logging import get_logger
from evalstream.sinks.base import Sink

__all__ = ["close_budget", "close_in_order", "final_commit", "finish_observers", "flush_sink",
           "stop_judge_waits"]

log = get_logger(__name__)

#: The steps after the drain (the observers' last step, flush, final commit, closing each
#: client) share this budget: with the broker unreachable each would wait out its own
#: timeout (aiokafka retries commits forever), and the chart's grace period leaves 15 s
#: past the drain. What is cut short is uncommitted, so redelivered, never lost.
_CLOSE_BUDGET_S = 12.0
#: No one step takes more than this, so a hung step leaves time to the others...
_CLOSE_STEP_S = 5.0
#: ...and each gets at least this, even once the budget is spent (to close its sockets).
_CLOSE_STEP_MIN_S = 0.2


def close_budget() -> SharedDeadline:
    """A fresh budget for the steps after the drain, from now."""
    return SharedDeadline(_CLOSE_BUDGET_S, _CLOSE_STEP_S, _CLOSE_STEP_MIN_S)


def stop_judge_waits(judges: Iterable[Judge], scopes: Collection[Hashable] | None = None,
                     ) -> None:
    """Cancel the evaluations waiting at a judge's spend cap (``on_spend_cap: wait``), or at
    its rate limits, open circuit or connection slots (``Judge.stop_waiting``): those of
    ``scopes`` (partition assignments: tracker states), or all. They could wait hours (a
    spend cap) or up to their deadline, and nothing more of them is sent."""
    for judge in judges:
        judge.stop_waiting(scopes)


async def finish_observers(tasks: Sequence[asyncio.Task[None]], budget: SharedDeadline) -> None:
    """Give the observers (already told to stop) one step of ``budget`` for their last step
    (the drift monitor resolves its alerts); cancel those still running then."""
    if tasks:
        wait_s = budget.step()
        _, late = await asyncio.wait(tasks, timeout=wait_s)
        if late:
            log.warning("observer_final_step_timeout", timeout_s=round(wait_s, 1))
        for task in late:
            task.cancel()


async def flush_sink(sink: Sink, budget: SharedDeadline,
                     fail: Callable[[BaseException], None]) -> None:
    """Flush the producer within one step of ``budget``; ``fail`` when it does not finish
    (its results are then not known to be durable)."""
    wait_s = budget.step()
    try:
        async with asyncio.timeout(wait_s):
            await sink.flush()
    except TimeoutError:  # results are not known to be durable
        fail(SinkError(f"producer flush did not finish within {wait_s:.1f}s"))
    except Exception as exc:
        fail(exc)


async def final_commit(committer: Committer, budget: SharedDeadline) -> None:
    """Commit what is durable, within one step of ``budget``."""
    wait_s = budget.step()
    try:
        async with asyncio.timeout(wait_s):
            await committer.commit()
    except TimeoutError:
        log.warning("final_commit_timeout", timeout_s=round(wait_s, 1))


async def close_in_order(steps: Iterable[Callable[[], Awaitable[None]]],
                         budget: SharedDeadline) -> None:
    """Run each closing step in turn, each within what is left of ``budget``; one that
    fails or takes too long is logged and the next runs."""
    for step in steps:
        try:
            async with asyncio.timeout(budget.step()):
                await step()
        except Exception as exc:
            log.warning("close_failed", step=step.__qualname__,
                        error=str(exc) or type(exc).__name__)
