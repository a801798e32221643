"""The exception tree: one root, a subclass per area, named for what the caller should do."""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DecodeError",
    "EvalstreamError",
    "EvaluatorError",
    "JudgeError",
    "JudgeSpendCapError",
    "JudgeUnavailableError",
    "JudgeUnsupportedError",
    "OutputRejectedError",
    "OutputTopicMissingError",
    "SinkError",
    "SkipEvaluation",
    "SourceError",
]


class EvalstreamError(Exception):
    """Root of every error evalstream raises on purpose."""


class ConfigError(EvalstreamError):
    """The configuration is invalid; the message names the field. Fix the config and restart."""


class DecodeError(EvalstreamError):
    """A message could not be decoded into trace events; it goes to the dead-letter topic.

    ``reason`` is a short, stable machine-readable code (e.g. ``invalid_json``) used as a
    metric label and a dead-letter header; ``str(exc)`` is the human explanation.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SkipEvaluation(EvalstreamError):  # control flow, named for intent
    """An evaluator cannot judge this event (e.g. no output); counted as a skip by ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EvaluatorError(EvalstreamError):
    """An evaluator failed on an event; the result is published with ``status: error``."""


class JudgeError(EvalstreamError):
    """A judge request failed.

    ``retryable`` is decided by the backend that raised it (429, 5xx, timeouts: yes;
    401/403/400: no), so the shared retry loop never guesses.
    """

    #: The ``events.JudgeInfo`` of the judge that failed: its backend and model, and what
    #: the failed call spent (requests, tokens, USD), so an error result can say which
    #: judge failed and what it cost. Set by the judge (``judges.base.with_judge_info``),
    #: read with ``judges.base.judge_info_of``; ``object`` because this module sits below
    #: ``events``. None when no judge set it.
    judge_info: object | None = None

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class JudgeUnavailableError(JudgeError):
    """The judge is unavailable (circuit open or deadline passed); the work may wait or fail."""


class JudgeSpendCapError(JudgeError):
    """The judge's spend within its window reached ``spend_cap_usd``: no request is sent.

    Not retryable: retrying cannot help before spend leaves the window (the message says
    when). The pipeline publishes it as an error result; a cascade answers with its first
    judge instead when that one gave an answer.
    """


class JudgeUnsupportedError(JudgeError):
    """This judge cannot answer this kind of question (e.g. builtin judge, custom rubric)."""


class SourceError(EvalstreamError):
    """The input source failed in a way that stops the worker (not a bad message)."""


class SinkError(EvalstreamError):
    """A result, alert or dead letter could not be made durable."""


class OutputTopicMissingError(SinkError):
    """An output topic does not exist (on a broker that does not create topics): start-up
    waits for it as for the broker, but says so, since the fix is to create the topic."""


class OutputRejectedError(EvalstreamError):
    """The broker refuses this one output for good (e.g. too large): retrying it, or the
    message it came from, cannot help. Not a ``SinkError``: the sink itself still works, so
    the worker publishes an error result in its place instead of stopping."""
