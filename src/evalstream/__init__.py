"""evalstream: online evaluation of LLM traces flowing through Kafka.

``python -m evalstream`` (or the ``evalstream`` script) runs the command line; the worker
itself is :func:`evalstream.app.worker.run_worker`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("evalstream")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
