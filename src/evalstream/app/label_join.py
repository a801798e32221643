"""Human labels joined with published results: the bounded store (no I/O).

A label (``{"result_id": ..., "gold": ...}`` on the labels topic) and the result it judges
(on the results topic) arrive in either order. Whichever comes first waits in a bounded,
time-limited store; when its other half comes, the pair is compared with the canaries'
comparison (``app/calibration.py``) and counted in ``evalstream_labels_*``.

Each waiting entry holds a *token* (the joiner's offset bookkeeping): it is handed back to
``release`` once the entry stops waiting (matched, expired, evicted, a duplicate), so the
joiner commits a partition only up to its oldest entry still waiting.

Duplicates count once: a result is compared with the first label that names it; a second
label for it (another labeller, a label published twice) or a result read again (a worker
redelivery publishes the same ``result_id``) is counted as a ``duplicate`` and dropped.
A matched result is kept (until it expires or is evicted) only to recognise these.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from evalstream.app.calibration import (
    MAX_GOLD_CHARS,
    Calibration,
    Comparison,
    Series,
    parse_result_gold,
)
from evalstream.events import EvalResult, load_json
from evalstream.metrics import Metrics

__all__ = ["LABEL_FORMAT", "HeldResult", "HumanLabel", "JoinStore", "Slim", "parse_label",
           "slim"]

T = TypeVar("T")

#: Longer result ids are not ours (``stable_hash`` gives 32 hex digits): refused as input.
_MAX_ID_CHARS = 128
#: What :func:`parse_label` accepts, as the dead-letter error says it.
LABEL_FORMAT = (f"a JSON object with a string result_id (1 to {_MAX_ID_CHARS} characters) "
                f"and a gold: a boolean, or a string of at most {MAX_GOLD_CHARS} characters")


@dataclass(frozen=True, slots=True)
class HumanLabel:
    """A label message: the result it judges and its gold answer, as given."""

    result_id: str
    gold: str


def parse_label(data: bytes | None) -> HumanLabel | None:
    """A label message's content, or None when it is not one (never raises).

    JSON object with ``result_id`` (a string) and ``gold`` (a string of at most
    ``MAX_GOLD_CHARS``, or a JSON boolean for binary evaluators); other keys
    (``labeller``, ``comment``, ...) are ignored.
    """
    if not data:
        return None
    try:
        obj: Any = load_json(data)
    except Exception:  # any undecodable payload is the same bad input
        return None
    if not isinstance(obj, dict):
        return None
    result_id, gold = obj.get("result_id"), obj.get("gold")
    if not isinstance(result_id, str) or not 0 < len(result_id) <= _MAX_ID_CHARS:
        return None
    if isinstance(gold, bool):
        gold = "true" if gold else "false"
    # Longer fits no evaluator, and a label waiting for its result holds its gold: up to
    # labels.max_labels of them, megabytes each from a bad producer.
    if not isinstance(gold, str) or len(gold) > MAX_GOLD_CHARS:
        return None
    return HumanLabel(result_id, gold)


@dataclass(frozen=True, slots=True)
class Slim:
    """What the comparison reads of a held result (a :class:`Forecast`), nothing more:
    reasons, details and attributes can be kilobytes, and a store holds up to
    ``labels.max_results`` results."""

    result_id: str
    status: str
    passed: bool | None
    score: float | None
    label: str | None
    probabilities: Mapping[str, float]


_NONE: Mapping[str, float] = MappingProxyType({})


def slim(result: EvalResult) -> Slim:
    """``result`` as the store holds it."""
    return Slim(result.result_id, result.status, result.passed, result.score, result.label,
                result.probabilities or _NONE)


@dataclass(frozen=True, slots=True)
class HeldResult:
    """A result as the store keeps it, with its labels from the configuration."""

    route: str
    evaluator: str
    #: The configured name of the evaluator's judge (the metrics' ``judge`` label).
    judge: str
    #: A label evaluator: gold is a class, else ``true``/``false``.
    is_label: bool
    result: Slim


@dataclass(slots=True)
class _Entry(Generic[T]):
    at: float
    #: The partition it came from (dropped together when the partition is revoked).
    part: Hashable
    #: None once released (a matched result kept to recognise duplicates).
    token: T | None
    result: HeldResult | None = None
    label: HumanLabel | None = None


class JoinStore(Generic[T]):
    """Results and labels waiting for each other, bounded in number and age.

    Args:
        metrics: Where matches, duplicates and drops are counted.
        release: Called with an entry's token once it no longer waits.
        retention_s: How long an entry waits (from ``now`` when it was added).
        max_results: Results held at most (matched ones included); the oldest go first.
        max_labels: Labels waiting at most; the oldest go first.
    """

    def __init__(self, metrics: Metrics, release: Callable[[T], None], *,
                 retention_s: float, max_results: int, max_labels: int) -> None:
        self._m = metrics
        self._calibration = Calibration(metrics, Series.human_labels(metrics))
        self._release = release
        self._retention_s = retention_s
        self._max = {"result": max_results, "label": max_labels}
        self._entries: dict[str, OrderedDict[str, _Entry[T]]] = {
            "result": OrderedDict(), "label": OrderedDict()}
        #: Results waiting for a label (those held and not matched).
        self._waiting_results = 0

    def waiting(self) -> dict[str, int]:
        """Entries waiting for their other half, by kind (``result``, ``label``)."""
        return {"result": self._waiting_results, "label": len(self._entries["label"])}

    def add_result(self, held: HeldResult, part: Hashable, token: T,
                   now: float) -> Comparison | None:
        """A result was read; returns the comparison when its label was waiting."""
        self.expire(now)
        rid = held.result.result_id
        results = self._entries["result"]
        if rid in results:
            self._ignored("result", "duplicate", token)
            return None
        waiting = self._entries["label"].pop(rid, None)
        if waiting is None:
            results[rid] = _Entry(now, part, token, result=held)
            self._waiting_results += 1
            self._bound("result")
            return None
        assert waiting.label is not None
        assert waiting.token is not None
        results[rid] = _Entry(now, part, None, result=held)
        self._release(waiting.token)
        self._release(token)
        comparison = self._record(held, waiting.label)
        self._bound("result")
        return comparison

    def add_label(self, label: HumanLabel, part: Hashable, token: T,
                  now: float) -> Comparison | None:
        """A label was read; returns the comparison when its result was held."""
        self.expire(now)
        entry = self._entries["result"].get(label.result_id)
        if entry is not None:
            if entry.token is None:  # compared already with an earlier label
                self._ignored("label", "duplicate", token)
                return None
            assert entry.result is not None
            self._release(entry.token)
            entry.token = None
            self._waiting_results -= 1
            self._release(token)
            return self._record(entry.result, label)
        labels = self._entries["label"]
        if label.result_id in labels:
            self._ignored("label", "duplicate", token)
            return None
        labels[label.result_id] = _Entry(now, part, token, label=label)
        self._bound("label")
        return None

    def expire(self, now: float) -> None:
        """Drop entries older than the retention (the oldest are first in each kind)."""
        for kind, entries in self._entries.items():
            while entries:
                entry = next(iter(entries.values()))
                if now - entry.at <= self._retention_s:
                    break
                entries.popitem(last=False)
                self._dropped(kind, entry, "expired")

    def drop_parts(self, parts: set[Hashable]) -> None:
        """Forget the entries of revoked partitions (their next owner reads them again
        from the last commit, which never passed an entry still waiting)."""
        for kind, entries in self._entries.items():
            for key in [k for k, e in entries.items() if e.part in parts]:
                self._dropped(kind, entries.pop(key), "revoked")

    def _bound(self, kind: str) -> None:
        entries = self._entries[kind]
        while len(entries) > self._max[kind]:
            _, entry = entries.popitem(last=False)
            self._dropped(kind, entry, "evicted")

    def _dropped(self, kind: str, entry: _Entry[T], reason: str) -> None:
        if entry.token is None:
            return  # a matched result: nothing waited, nothing lost
        if kind == "result":
            self._waiting_results -= 1
        self._m.labels_unmatched.labels(kind, reason).inc()
        self._release(entry.token)

    def _ignored(self, kind: str, reason: str, token: T) -> None:
        self._m.labels_ignored.labels(kind, reason).inc()
        self._release(token)

    def _record(self, held: HeldResult, label: HumanLabel) -> Comparison | None:
        # Checked against the result's own label set, as a canary's is: the joiner builds
        # no evaluators to ask (they need judges).
        gold = parse_result_gold(label.gold, held.result.probabilities,
                                 is_label=held.is_label)
        return self._calibration.record(held.route, held.evaluator, held.judge, gold,
                                        held.result)
