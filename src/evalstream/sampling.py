"""Deterministic hash sampling (pure, no I/O).

Each event gets a fixed fraction in [0, 1) from a hash of its sampling key (``trace_id`` by
default, so every span of a trace is sampled together) and an optional salt. An event is
sampled at rate ``r`` when its fraction is below ``r``; rates therefore nest: an event
sampled at 1% is also sampled at 10%, and a route's rate multiplies with the global rate.
"""

from __future__ import annotations

import hashlib

from evalstream.config import SamplingSettings
from evalstream.events import TraceEvent

__all__ = ["Sampler"]

_SCALE = float(1 << 64)


class Sampler:
    """Decides which events are evaluated, reproducibly across workers and restarts."""

    __slots__ = ("_key", "_rate", "_salt")

    def __init__(self, settings: SamplingSettings) -> None:
        self._key = settings.key
        self._rate = settings.rate
        # A NUL separates salt and key so ("a", "bc") and ("ab", "c") never collide.
        self._salt = settings.salt.encode("utf-8") + b"\x00" if settings.salt else b""

    @property
    def global_rate(self) -> float:
        """The rate applied to every route."""
        return self._rate

    def rate_for(self, route_rate: float) -> float:
        """The effective rate of a route: global rate x the route's own rate."""
        return self._rate * route_rate

    @property
    def key(self) -> str:
        """The TraceEvent field sampling hashes."""
        return self._key

    def fraction(self, event: TraceEvent) -> float:
        """The event's position in [0, 1); the same key always gives the same fraction.

        An empty key (e.g. no session id) falls back to ``event_id`` so such events still
        spread evenly instead of all landing on one side of every threshold.
        """
        return self.fraction_of(getattr(event, self._key) or event.event_id)

    def fraction_of(self, value: str) -> float:
        """The fraction of a raw key value (decoders use it before building an event)."""
        digest = hashlib.blake2b(self._salt + value.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") / _SCALE

    @staticmethod
    def sampled(fraction: float, rate: float) -> bool:
        """Whether an event at ``fraction`` is kept at ``rate`` (rate 1 keeps all, 0 none)."""
        return fraction < rate
