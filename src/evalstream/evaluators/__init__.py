"""Evaluators: one module per family, registered by name (see ``registry``)."""

from evalstream.evaluators.base import Evaluator, EvaluatorParams, Score
from evalstream.evaluators.registry import create, describe, names, register

__all__ = ["Evaluator", "EvaluatorParams", "Score", "create", "describe", "names", "register"]
