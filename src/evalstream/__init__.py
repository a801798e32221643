"""evalstream: online evaluation of LLM traces flowing through Kafka.

``python -m evalstream`` (or the ``evalstream`` script) runs the command line; the worker
itself is :func:`evalstream.app.worker.run_worker`.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # ``__version__`` is looked up on first use, not on import: importlib.metadata costs
    # ~0.1 s, and every command imports this package before it can install its SIGTERM
    # handling (``evalstream run`` must not die of a SIGTERM while still starting).
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("evalstream")
    except PackageNotFoundError:  # running from a source tree that is not installed
        found = "0.0.0+unknown"
    globals()["__version__"] = found
    return found
