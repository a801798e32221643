"""The builtin offline judge (lexicons and heuristics): ``BuiltinJudge``."""

from evalstream.judges.builtin.judge import TASKS, BuiltinJudge

__all__ = ["TASKS", "BuiltinJudge"]
