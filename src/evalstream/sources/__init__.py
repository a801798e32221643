"""Input sources: the Kafka consumer and an in-memory source for tests."""

from evalstream.sources.base import TP, RebalanceHandler, Source

__all__ = ["TP", "RebalanceHandler", "Source"]
