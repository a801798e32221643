"""``masked_dump``: the effective configuration as plain data, safe to print."""

from __future__ import annotations

import re
from typing import Any

from evalstream.config.judges import MASK, redact_url
from evalstream.config.settings import Settings

__all__ = ["masked_dump"]

#: ``kafka.extra`` names whose values are masked (aiokafka's sasl_plain_password, tokens...):
#: broad, as masking too much costs nothing (``config.loading`` refuses keys more narrowly).
_SECRET_NAME = re.compile(r"pass|secret|token|key|cred|auth", re.IGNORECASE)


def _plain(value: Any) -> Any:
    """A printable form of an ``extra`` value: JSON scalars as they are, objects by type."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return f"<{type(value).__name__}>"


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data with every secret masked.

    ``SecretStr`` fields dump as the mask. So do judge header and query values (gateways
    take keys there: ``X-Goog-Api-Key``, ``Ocp-Apim-Subscription-Key``, ``?key=``), the
    user info in a ``base_url``, and ``kafka.extra`` values whose names look secret.
    """
    data = settings.model_dump(mode="json", exclude={"kafka": {"extra"}})
    data["kafka"]["extra"] = {
        name: MASK if _SECRET_NAME.search(name) else _plain(value)
        for name, value in settings.kafka.extra.items()}
    for judge in data["judges"].values():
        if judge.get("type") == "openai":
            judge["base_url"] = redact_url(judge["base_url"])
            judge["headers"] = dict.fromkeys(judge["headers"], MASK)
            judge["query"] = dict.fromkeys(judge["query"], MASK)
    return data
