"""What ``evalstream demo`` shows: live pass rates with intervals, volume and alerts.

:class:`DemoState` is fed the results and alerts the worker published (read back from
Kafka, as any downstream consumer would) and the traffic generator's counts. It renders
either as a ``rich`` live view (a terminal) or as plain periodic lines (a pipe, a log, the
README capture), from the same numbers.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from evalstream.drift.stats import SlidingCounts, WindowStats
from evalstream.events import Alert, EvalResult

__all__ = ["DemoState", "Phase", "format_alert"]

#: The view's pass-rate window: short, so the spike and the recovery are visible at once.
WINDOW_S = 30
_BUCKET_S = 1
_MIN_SAMPLES = 10
_RATE_WINDOW_S = 10.0
_MAX_LOG = 8


@dataclass(frozen=True)
class Phase:
    """The traffic generator's schedule, in seconds since traffic started."""

    spike_after: float
    spike_duration: float

    def name(self, t: float) -> str:
        """``baseline``, ``INCIDENT`` (the injected off-topic spike) or ``recovery``."""
        if t < self.spike_after:
            return "baseline"
        if t < self.spike_after + self.spike_duration:
            return "INCIDENT"
        return "recovery"

    def incident(self, t: float) -> bool:
        """True while the off-topic spike is injected."""
        return self.name(t) == "INCIDENT"


def _pct(x: float | None) -> str:
    return "  -  " if x is None else f"{x:6.1%}"


def format_alert(alert: Alert) -> str:
    """One line per alert transition, e.g. ``FIRING warning support/topic_adherence ...``."""
    state = "FIRING  " if alert.state == "firing" else "RESOLVED"
    return f"{state} {alert.severity:<8} {alert.route}/{alert.evaluator} ({alert.kind}): " \
           f"{alert.summary}"


@dataclass
class _Key:
    passes: SlidingCounts = field(default_factory=lambda: SlidingCounts(_BUCKET_S, WINDOW_S))
    total: int = 0
    labels: Counter[str] = field(default_factory=Counter)


@dataclass
class DemoState:
    """Counts and windows behind the demo's view.

    Args:
        phase: The traffic schedule (for the phase banner).
        metrics_url: Where the worker's /metrics is served.
        clock: Monotonic seconds (injectable for tests).
    """

    phase: Phase
    metrics_url: str
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)
    traffic_started: float | None = None
    sent: Counter[str] = field(default_factory=Counter)
    evaluated: int = 0
    errors: int = 0
    alerts_fired: int = 0
    alerts_resolved: int = 0
    firing: dict[str, Alert] = field(default_factory=dict)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=_MAX_LOG))
    _keys: dict[tuple[str, str], _Key] = field(default_factory=dict)
    _recent: deque[float] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.started = self.clock()

    # --- feeding -------------------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds since traffic started (0 before)."""
        if self.traffic_started is None:
            return 0.0
        return self.clock() - self.traffic_started

    def on_sent(self, app: str) -> None:
        """Count one event the traffic generator produced."""
        if self.traffic_started is None:
            self.traffic_started = self.clock()
        self.sent[app] += 1

    def on_result(self, result: EvalResult) -> None:
        """Count one published result."""
        now = self.clock()
        self.evaluated += 1
        self._recent.append(now)
        if result.status != "ok":
            self.errors += 1
            return
        key = self._keys.setdefault((result.route, result.evaluator), _Key())
        key.total += 1
        if result.passed is not None:
            key.passes.add(now, result.passed)
        if result.label is not None and result.passed is None:
            key.labels[result.label] += 1

    def on_alert(self, alert: Alert) -> str:
        """Track one alert transition; returns the line to log."""
        name = f"{alert.route}/{alert.evaluator}/{alert.kind}"
        if alert.state == "firing":
            self.alerts_fired += 1
            self.firing[name] = alert
        else:
            self.alerts_resolved += 1
            self.firing.pop(name, None)
        line = f"t+{self.elapsed():5.0f}s {format_alert(alert)}"
        self.log.append(line)
        return line

    # --- reading -------------------------------------------------------------------------

    def throughput(self) -> float:
        """Evaluations per second over the last few seconds."""
        now = self.clock()
        while self._recent and now - self._recent[0] > _RATE_WINDOW_S:
            self._recent.popleft()
        span = min(_RATE_WINDOW_S, max(now - self.started, 1e-9))
        return len(self._recent) / span

    def rows(self) -> list[tuple[str, str, WindowStats, int]]:
        """``(route, evaluator, window stats, total)`` for evaluators with a pass/fail verdict."""
        now = self.clock()
        out = []
        for (route, evaluator), key in sorted(self._keys.items()):
            if key.passes.last_t is None:
                continue
            out.append((route, evaluator, key.passes.stats(now, WINDOW_S, _MIN_SAMPLES),
                        key.total))
        return out

    # --- rendering -----------------------------------------------------------------------

    def plain_line(self) -> str:
        """One status line for non-terminal output."""
        t = self.elapsed()
        parts = [f"t+{t:5.0f}s phase={self.phase.name(t):<8} sent={sum(self.sent.values())} "
                 f"evaluated={self.evaluated} ({self.throughput():.1f}/s)"]
        for route, evaluator, stats, _ in self.rows():
            if stats.rate is None:
                continue
            parts.append(f"{route}/{evaluator} {stats.rate:.0%} "
                         f"[{stats.lower:.0%}-{stats.upper:.0%}] n={stats.n}")
        firing = ", ".join(sorted(self.firing)) or "none"
        parts.append(f"alerts firing: {firing}")
        return " | ".join(parts)

    def render(self) -> RenderableType:
        """The rich live view."""
        t = self.elapsed()
        phase = self.phase.name(t)
        style = {"baseline": "green", "INCIDENT": "bold red", "recovery": "yellow"}[phase]
        header = Text.assemble(
            ("evalstream demo", "bold"), "  ",
            (f"t+{t:.0f}s", "cyan"), "  phase: ", (phase, style),
            f"  (spike at t+{self.phase.spike_after:.0f}s for "
            f"{self.phase.spike_duration:.0f}s)\n",
            f"events sent {sum(self.sent.values())}  ",
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.sent.items()))})  ",
            f"evaluations {self.evaluated} ({self.throughput():.1f}/s)  errors {self.errors}",
        )
        table = Table(title=f"pass rate over the last {WINDOW_S}s (95% Wilson interval)",
                      expand=True)
        table.add_column("route")
        table.add_column("evaluator")
        table.add_column("pass rate", justify="right")
        table.add_column("95% interval", justify="right")
        table.add_column("n", justify="right")
        table.add_column("", ratio=1, no_wrap=True, overflow="crop")
        table.add_column("total", justify="right")
        for route, evaluator, stats, total in self.rows():
            alerting = any(a.route == route and a.evaluator == evaluator
                           for a in self.firing.values())
            interval = "" if stats.lower is None else f"{stats.lower:.0%} - {stats.upper:.0%}"
            bar = "" if stats.rate is None else "█" * round(stats.rate * 20)
            table.add_row(route, evaluator, _pct(stats.rate), interval, str(stats.n),
                          Text(bar, style="red" if alerting else "green"), str(total),
                          style="bold red" if alerting else None)
        labels = Table(title="labels (all time)", expand=True, show_header=False)
        for (route, evaluator), key in sorted(self._keys.items()):
            if key.labels:
                total = sum(key.labels.values())
                shares = "  ".join(f"{label} {n / total:.0%}"
                                   for label, n in key.labels.most_common(4))
                labels.add_row(f"{route}/{evaluator}", shares)
        alert_lines = Text("\n".join(self.log) if self.log else "no alerts yet")
        alerts = Panel(alert_lines, title=f"alerts (fired {self.alerts_fired}, resolved "
                       f"{self.alerts_resolved}, firing now {len(self.firing)})",
                       border_style="red" if self.firing else "green")
        footer = Text(f"metrics: {self.metrics_url}   Ctrl-C to stop", style="dim")
        parts: list[RenderableType] = [header, table]
        if labels.row_count:
            parts.append(labels)
        parts += [alerts, footer]
        return Panel(Group(*parts), border_style=style)
