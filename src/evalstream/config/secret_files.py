"""Secrets mounted as files (Kubernetes Secrets, Docker secrets): read, checked, stripped."""

from __future__ import annotations

from pathlib import Path

from evalstream.errors import ConfigError

__all__ = ["read_secret_file"]


def read_secret_file(path: Path, field: str) -> str:
    """The secret in ``path``, stripped of surrounding whitespace.

    Args:
        path: The file.
        field: The config field that names it, for the error message.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 text, or is empty (usually a
            secret mounted before it was filled in: every request would then fail at run
            time instead of here).
    """
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or "not UTF-8 text"
        raise ConfigError(f"{field}: cannot read {path}: {why}") from exc
    if not secret:
        raise ConfigError(f"{field}: {path} is empty")
    return secret
