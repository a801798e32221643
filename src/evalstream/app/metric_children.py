"""Per-result metric updates without prometheus-client's per-call checks (hot path).

Every evaluated event updates four counter children and three histogram children, bound
once per (route, evaluator). ``Counter.inc`` checks on every call that the child has its
labels and that the amount is not negative, then takes the value's lock; ``Histogram
.observe`` does the same and then walks the buckets in Python (an event's lag, past the last
bound, walks all twelve). Together that was ~7% of the worker's CPU per evaluated event
(py-spy under bench/evaluate_path.py). The functions here return, for a bound child, a
callable that makes the same update: the value's own ``inc`` for a counter, and for a
histogram the sum and the one bucket ``observe`` picks (found by bisection). The exposition
is the same (pinned by tests/unit/test_metric_children.py).

They read prometheus-client's attributes of a child (``_value``, ``_sum``, ``_buckets``,
``_upper_bounds``): should a release change them, the child's public method is returned
instead, so an upgrade can cost speed, never counts.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Histogram

__all__ = ["counter_inc", "histogram_observe"]


def counter_inc(child: Counter) -> Callable[[float], None]:
    """``child.inc`` for amounts the caller knows are >= 0 (a labelled child's).

    Args:
        child: A counter child (``counter.labels(...)``) or an unlabelled counter.

    Returns:
        A function adding its argument to the child's value.
    """
    internals: Any = child
    inc: Callable[[float], None] | None = getattr(getattr(child, "_value", None), "inc", None)
    if inc is None or type(child).inc is not Counter.inc or not internals._is_observable():
        return child.inc
    return inc


def histogram_observe(child: Histogram) -> Callable[[float], None]:
    """``child.observe``, with the bucket found by bisection instead of a Python loop.

    Args:
        child: A histogram child (``histogram.labels(...)``) or an unlabelled histogram.

    Returns:
        A function observing its argument: added to the sum, counted in the first bucket
        whose upper bound is >= it (none for NaN, as ``Histogram.observe`` does).
    """
    internals: Any = child
    try:
        bounds = tuple(float(b) for b in internals._upper_bounds)
        buckets = tuple(bucket.inc for bucket in internals._buckets)
        add: Callable[[float], None] = internals._sum.inc
    except (AttributeError, TypeError):
        return child.observe
    if (type(child).observe is not Histogram.observe or not internals._is_observable()
            or len(bounds) != len(buckets) or list(bounds) != sorted(bounds)):
        return child.observe
    count = len(bounds)

    def observe(amount: float) -> None:
        add(amount)
        index = bisect_left(bounds, amount)
        # ``amount == amount`` is False only for NaN, which ``observe`` counts in no bucket.
        if index < count and amount == amount:
            buckets[index](1)

    return observe
