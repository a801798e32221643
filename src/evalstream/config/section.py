"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A frozen part of the settings that rejects keys it does not know (a typo in the
    YAML fails at start-up, naming the key, instead of being silently ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
