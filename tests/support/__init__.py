"""Shared test support: the real broker, free ports, waiting helpers."""
