"""What both evaluation paths do once an evaluation's result cannot simply be published.

The message path (``app/message_path.py``, one evaluation per task) and the session path
(``app/session_path.py``, the evaluations of a closed session window) each run an
evaluation, publish its result through ``Outputs`` and count it with ``Pipeline.record``.
That success path stays inline in each (the message path's runs thousands of times a
second and takes no extra coroutine for it); what is shared lives here: counting a
published result without ever publishing it twice, and publishing the error result that
stands in for one the broker refused for good, or one a bug kept from being published.

A ``SinkError`` is not stood in for: output cannot be made durable, so the caller hands it
to ``fail`` (the worker stops). Each path keeps its own cancel handling and offset
bookkeeping; the log line saying why a result was stood in for is written here, so both
paths say it under the same event names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalstream.app.bindings import Planned
from evalstream.app.outputs import Outputs
from evalstream.app.pipeline import Pipeline
from evalstream.errors import OutputRejectedError
from evalstream.events import EvalResult, JudgeInfo, TraceEvent
from evalstream.logging import LogLimit, get_logger

__all__ = ["ResultPublisher", "with_details"]

log = get_logger(__name__)


def with_details(result: EvalResult, extra: Mapping[str, Any]) -> EvalResult:
    """``result`` with ``extra`` added to its details (the evaluator's own keys kept)."""
    return result.model_copy(update={"details": {**result.details, **extra}})


class ResultPublisher:
    """Counts published results and publishes the error results standing in for others.

    Args:
        pipeline: Builds error results and counts outcomes.
        outputs: Where error results are published.
        fail: Called when output cannot be made durable (the worker then stops).
    """

    def __init__(self, pipeline: Pipeline, outputs: Outputs,
                 fail: Callable[[BaseException], None]) -> None:
        self._pipeline = pipeline
        self._outputs = outputs
        self._fail = fail
        #: Both can repeat on every event (a plugin's details JSON cannot hold, results
        #: over the size limit): a burst of lines each, then one a second.
        self._rejected_logs = LogLimit()
        self._crashed_logs = LogLimit()

    def count(self, planned: Planned, result: EvalResult) -> None:
        """Count a published result; a failure here must not publish it a second time."""
        try:
            self._pipeline.record(planned, result)
        except Exception as exc:
            log.error("result_count_failed", error_type=type(exc).__name__)

    async def stand_in(self, event: TraceEvent, planned: Planned, exc: Exception,
                       extra: Mapping[str, Any] | None = None,
                       judge: JudgeInfo | None = None) -> bool:
        """Publish and count the error result of ``planned`` on ``event`` in place of the
        result ``exc`` kept from being published; False (after ``fail``) when that could
        not be made durable either.

        Publishing the error instead keeps the offset from being held forever, which would
        freeze the partition's commits (or, stopping, crash on every restart). It carries
        the judge spend of the result it stands in for, which no other result carries: it
        is then on the results topic and in ``evalstream_evaluation_cost_usd_total``.

        Args:
            event: The evaluated event.
            planned: The evaluation.
            exc: Why its result was not published: ``OutputRejectedError`` (the broker
                refused it for good, e.g. too large) or a bug (named by its type only).
            extra: Added to the error result's details.
            judge: The ``judge`` of the result it stands in for (None when there was none,
                as when a bug kept the evaluation from giving one).
        """
        if isinstance(exc, OutputRejectedError):
            if (fields := self._rejected_logs.fields()) is not None:
                log.warning("result_rejected", error=str(exc), **fields)
            why = f"result rejected: {exc}"
        else:
            # A bug: named by its type only, as its message may quote the event.
            if (fields := self._crashed_logs.fields()) is not None:
                log.error("evaluation_crashed", error_type=type(exc).__name__, **fields)
            why = f"internal error: {type(exc).__name__}"
        try:
            failed = self._pipeline.failed(event, planned, why, judge)
            if extra is not None:
                failed = with_details(failed, extra)
            await self._outputs.result(failed)
            self.count(planned, failed)
        except Exception as again:
            self._fail(again)
            return False
        return True
