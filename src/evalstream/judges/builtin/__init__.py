"""The builtin offline judge (lexicons and heuristics): ``BuiltinJudge``."""

from evalstream.judges.builtin.judge import TASKS, VERSION, BuiltinJudge

__all__ = ["TASKS", "VERSION", "BuiltinJudge"]
