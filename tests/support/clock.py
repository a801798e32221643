"""A hand-driven clock for code that takes an injected ``clock`` callable."""

from __future__ import annotations


class FakeClock:
    """Returns ``now`` when called; tests move time by setting it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
