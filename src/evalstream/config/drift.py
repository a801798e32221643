"""Live pass-rate windows and drift detection settings."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from evalstream.config.section import Section

__all__ = ["DriftSettings", "Severity"]

Severity = Literal["info", "warning", "critical"]
#: The kinds of alert the detector raises.
_ALERT_KINDS = ("pass_rate_drop", "label_share", "label_mix")


def _default_severities() -> dict[str, Severity]:
    return {"pass_rate_drop": "warning", "label_share": "warning", "label_mix": "info"}


class DriftSettings(Section):
    """Windows for live pass rates and the drift detector's tuning.

    The detector per (route, evaluator) is a Bernoulli CUSUM for a drop in pass rate below a
    baseline; for label evaluators a second CUSUM watches the share of one label (e.g. the
    ``other`` topic). Its threshold comes from ``arl0``: the average number of evaluations
    between false alarms when nothing changed.
    """

    enabled: bool = True
    #: Sliding windows for the live pass-rate gauges, in seconds.
    windows_s: list[int] = Field(default_factory=lambda: [300, 3600], min_length=1)
    #: Width of the buckets windows are made of; memory per key is largest window / bucket.
    bucket_s: int = Field(default=10, ge=1)
    #: Below this many (weighted) evaluations a window reports "not enough data".
    min_samples: int = Field(default=30, ge=1)
    #: How often the monitor refreshes gauges and publishes alert state changes.
    tick_s: float = Field(default=1.0, gt=0)

    # --- baseline ---------------------------------------------------------------------
    #: Evaluations per (route, evaluator) used to learn the baseline before detecting.
    warmup_samples: int = Field(default=1000, ge=10)
    #: A learned baseline is taken this many standard errors on the pessimistic side when
    #: tuning the detector, so warm-up noise does not inflate the false-alarm rate.
    warmup_margin_z: float = Field(default=1.0, ge=0.0, le=3.0)
    #: Configured baselines (pass rate), key ``"route/evaluator"`` or just ``"evaluator"``;
    #: a configured key skips the warm-up.
    baselines: dict[str, float] = Field(default_factory=dict)

    # --- pass-rate drop (Bernoulli CUSUM) -------------------------------------------
    #: Smallest absolute drop in pass rate worth detecting (the CUSUM is tuned to it).
    #: At least 0.001: designs round rates to 4 decimals, so a smaller shift vanishes (a
    #: division by zero when the detector is armed).
    min_shift: float = Field(default=0.10, ge=0.001, lt=1.0)
    #: Target in-control average run length: evaluations between false alarms per key.
    #: At one evaluation a second, 2e6 is roughly one false alarm per 23 days. At most 1e9
    #: (~32 years): above it the design's search grows without end (inf: a crash).
    arl0: float = Field(default=2_000_000.0, ge=100.0, le=1e9)
    #: No alert before the detector has seen this many evaluations after the baseline.
    min_detect_samples: int = Field(default=50, ge=1)
    #: Hysteresis: a firing alert resolves when the statistic falls below this share of
    #: the threshold (above 0: the statistic is never below 0, so 0 would never resolve)
    #: ...
    resolve_ratio: float = Field(default=0.5, gt=0.0, lt=1.0)
    #: ... and while firing the statistic is capped at this multiple of the threshold, so
    #: a long incident resolves in bounded time once the pass rate recovers.
    cap_ratio: float = Field(default=1.5, ge=1.0)

    # --- label mix ------------------------------------------------------------------
    #: Evaluators to watch: evaluator name -> the label whose share must not rise. Label
    #: evaluators, or any whose results have a closed label set (``refusal: refused``);
    #: the label must be one the evaluator gives (checked at start-up).
    watch_labels: dict[str, str] = Field(
        default_factory=lambda: {"topic": "other", "sentiment": "negative"})
    #: Smallest absolute rise in the watched label's share worth detecting.
    label_min_shift: float = Field(default=0.10, ge=0.001, lt=1.0)  # as min_shift
    #: G-test of the whole label mix of watched evaluators (shortest window vs baseline):
    #: fires below this p-value (small: it is re-tested every tick on overlapping windows)
    #: ...
    mix_alpha: float = Field(default=1e-6, gt=0.0, lt=0.5)
    #: ... and resolves above this one (hysteresis).
    mix_resolve_p: float = Field(default=0.01, gt=0.0, lt=1.0)

    # --- alerts -----------------------------------------------------------------------
    #: Severity per alert kind (``pass_rate_drop``, ``label_share``, ``label_mix``).
    severities: dict[str, Severity] = Field(default_factory=_default_severities)
    #: Escalate to ``critical`` when the live window's whole interval sits this far beyond
    #: the baseline (upper bound below baseline - x, or lower bound above share + x).
    critical_shift: float = Field(default=0.20, gt=0.0, le=1.0)
    #: A firing alert with no new evaluations for this long resolves as stale (a label-mix
    #: alert also when its window held fewer than ``min_samples`` labels, too few to test).
    stale_after_s: float = Field(default=3600.0, gt=0)

    @field_validator("severities")
    @classmethod
    def _known_kinds(cls, severities: dict[str, Severity]) -> dict[str, Severity]:
        # A misspelt kind used to be accepted and ignored: its alerts kept their default.
        unknown = sorted(set(severities) - set(_ALERT_KINDS))
        if unknown:
            raise ValueError(f"unknown alert kind(s) {unknown} (kinds: {', '.join(_ALERT_KINDS)})")
        return severities

    @model_validator(mode="after")
    def _check(self) -> DriftSettings:
        for key, value in self.baselines.items():
            if not 0.0 < value < 1.0:
                raise ValueError(f"drift.baselines[{key!r}]: a pass rate strictly between 0 "
                                 f"and 1 is needed, got {value}")
        for w in self.windows_s:
            if w < self.bucket_s or w % self.bucket_s:
                raise ValueError(f"drift.windows_s: {w} must be a multiple of bucket_s "
                                 f"({self.bucket_s})")
        return self
