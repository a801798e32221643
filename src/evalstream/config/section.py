"""The base of every configuration section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    """A frozen part of the settings that rejects keys it does not know (a typo in the
    YAML fails at start-up, naming the key, instead of being silently ignored) and numbers
    that are not finite: an infinite interval or timeout (``.inf``, ``1e999``) means never,
    which no setting means (commits that never came, a drain that never gave up)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
