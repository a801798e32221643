"""Live pass-rate windows and drift detection settings."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DriftSettings"]


class DriftSettings(BaseModel):
    """Windows for live pass rates and the drift detector's tuning."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    #: Sliding windows for the live pass-rate gauges, in seconds.
    windows_s: list[int] = Field(default_factory=lambda: [300, 3600], min_length=1)
    #: Below this many (weighted) evaluations a window reports "not enough data".
    min_samples: int = Field(default=30, ge=1)
