"""Imports every builtin evaluator module so each registers itself."""

from evalstream.evaluators import refusal  # noqa: F401
