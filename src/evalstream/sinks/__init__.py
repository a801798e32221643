"""Output sinks: results, dead letters and alerts (Kafka, and memory for tests)."""

from evalstream.sinks.base import Sink

__all__ = ["Sink"]
