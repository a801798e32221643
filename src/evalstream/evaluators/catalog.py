"""Imports every builtin evaluator module so each registers itself."""

from evalstream.evaluators import (  # noqa: F401
    custom,
    injection,
    labels,
    rag,
    refusal,
    role_adherence,
    role_violation,
    scales,
    summarization,
    topic_adherence,
)
