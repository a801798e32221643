"""The human-label join store: either order, duplicates counted once, bounded by age and
number, every waiting entry's token released exactly once, figures equal ``compare``'s."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from evalstream.app.calibration import BIN_LABELS, compare, confidence_bin
from evalstream.app.label_join import HeldResult, HumanLabel, JoinStore, parse_label, slim
from evalstream.events import EvalResult, dump_json
from evalstream.metrics import Metrics

KEY = {"route": "r", "evaluator": "refusal", "judge": "builtin"}
P0, P1 = ("labels", 0), ("labels", 1)


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def binary(rid: str, passed: bool = True, score: float = 0.8,
           status: str = "ok") -> HeldResult:
    result = EvalResult(result_id=rid, event_id=rid, trace_id=rid, route="r",
                        evaluator="refusal", passed=passed, score=score, status=status,
                        reason="a long explanation", details={"k": "v"})
    return HeldResult("r", "refusal", "builtin", False, slim(result))


class Store:
    """A store on a fresh registry that records the tokens it releases."""

    def __init__(self, retention_s: float = 10.0, max_results: int = 100,
                 max_labels: int = 100) -> None:
        self.metrics = Metrics()
        self.released: list[str] = []
        self.join: JoinStore[str] = JoinStore(
            self.metrics, self.released.append, retention_s=retention_s,
            max_results=max_results, max_labels=max_labels)

    def v(self, name: str, **labels: str) -> float:
        return value(self.metrics.registry, name, **labels)

    def outcome(self, outcome: str) -> float:
        return self.v("evalstream_labels_evaluations_total", **KEY, outcome=outcome)


@pytest.mark.parametrize("label_first", [False, True])
def test_a_pair_is_compared_in_either_order(label_first: bool) -> None:
    s = Store()
    held = binary("a", passed=True, score=0.8)
    label = HumanLabel("a", "false")
    if label_first:
        assert s.join.add_label(label, P0, "label@0", now=0.0) is None
        assert s.join.waiting() == {"result": 0, "label": 1}
        comparison = s.join.add_result(held, P1, "result@0", now=1.0)
    else:
        assert s.join.add_result(held, P1, "result@0", now=0.0) is None
        assert s.join.waiting() == {"result": 1, "label": 0}
        comparison = s.join.add_label(label, P0, "label@0", now=1.0)
    assert comparison == compare(held.result, False)
    assert sorted(s.released) == ["label@0", "result@0"]
    assert s.join.waiting() == {"result": 0, "label": 0}
    assert (s.outcome("disagreed"), s.outcome("agreed")) == (1, 0)
    assert s.v("evalstream_labels_brier_total", **KEY) == pytest.approx(0.8 ** 2)
    b = BIN_LABELS[confidence_bin(0.8)]
    assert s.v("evalstream_labels_calibration_results_total", **KEY, bin=b) == 1
    assert s.v("evalstream_labels_calibration_confidence_total", **KEY, bin=b) == \
        pytest.approx(0.8)
    assert s.v("evalstream_labels_calibration_correct_total", **KEY, bin=b) == 0
    # Canary series untouched: labels are their own series.
    assert s.v("evalstream_canary_evaluations_total", **KEY, outcome="disagreed") == 0


def test_a_second_label_for_a_matched_result_counts_once() -> None:
    s = Store()
    s.join.add_result(binary("a"), P1, "r0", now=0.0)
    s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=1.0)
    assert s.join.add_label(HumanLabel("a", "false"), P0, "l1", now=2.0) is None
    assert (s.outcome("agreed"), s.outcome("disagreed")) == (1, 0)
    assert s.v("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 1
    assert sorted(s.released) == ["l0", "l1", "r0"]


def test_the_same_label_twice_before_its_result_counts_once() -> None:
    s = Store()
    s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=0.0)
    s.join.add_label(HumanLabel("a", "true"), P0, "l1", now=0.5)
    s.join.add_result(binary("a"), P1, "r0", now=1.0)
    assert s.outcome("agreed") == 1
    assert s.v("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 1
    assert sorted(s.released) == ["l0", "l1", "r0"]


@pytest.mark.parametrize("matched_first", [False, True])
def test_a_redelivered_result_counts_once(matched_first: bool) -> None:
    s = Store()
    s.join.add_result(binary("a", passed=True), P1, "r0", now=0.0)
    if matched_first:
        s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=0.5)
    # A worker redelivery publishes the same result_id (perhaps another score): the first
    # one read is the one compared.
    s.join.add_result(binary("a", passed=False, score=0.1), P1, "r1", now=1.0)
    if not matched_first:
        s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=1.5)
    assert (s.outcome("agreed"), s.outcome("disagreed")) == (1, 0)
    assert s.v("evalstream_labels_ignored_total", kind="result", reason="duplicate") == 1
    assert sorted(s.released) == ["l0", "r0", "r1"]


def test_after_a_label_first_match_repeats_of_either_half_count_once() -> None:
    s = Store()
    s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=0.0)
    assert s.join.add_result(binary("a"), P1, "r0", now=1.0) is not None
    # A redelivered result and a second label both find the matched result.
    assert s.join.add_result(binary("a", passed=False), P1, "r1", now=2.0) is None
    assert s.join.add_label(HumanLabel("a", "false"), P0, "l1", now=3.0) is None
    assert (s.outcome("agreed"), s.outcome("disagreed")) == (1, 0)
    assert s.v("evalstream_labels_ignored_total", kind="result", reason="duplicate") == 1
    assert s.v("evalstream_labels_ignored_total", kind="label", reason="duplicate") == 1
    assert sorted(s.released) == ["l0", "l1", "r0", "r1"]
    assert s.join.waiting() == {"result": 0, "label": 0}


def test_entries_expire_unmatched_and_are_counted() -> None:
    s = Store(retention_s=10.0)
    s.join.add_label(HumanLabel("late", "true"), P0, "l0", now=0.0)
    s.join.add_result(binary("unlabelled"), P1, "r0", now=5.0)
    s.join.expire(now=10.0)  # exactly the retention: still waits
    assert s.released == []
    s.join.expire(now=10.5)
    assert s.released == ["l0"]
    assert s.v("evalstream_labels_unmatched_total", kind="label", reason="expired") == 1
    # The label's result comes too late: it waits in turn, nothing is compared.
    assert s.join.add_result(binary("late"), P1, "r1", now=11.0) is None
    assert s.outcome("agreed") == 0
    s.join.expire(now=16.0)
    assert s.v("evalstream_labels_unmatched_total", kind="result", reason="expired") == 1
    assert s.released == ["l0", "r0"]
    assert s.join.waiting() == {"result": 1, "label": 0}


@pytest.mark.parametrize("label_first", [False, True])
def test_a_half_older_than_the_retention_is_not_joined(label_first: bool) -> None:
    # Whichever half comes second, the first has expired by then: nothing is compared.
    s = Store(retention_s=10.0)
    if label_first:
        s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=0.0)
        assert s.join.add_result(binary("a"), P1, "r0", now=20.0) is None
        assert s.join.waiting() == {"result": 1, "label": 0}
    else:
        s.join.add_result(binary("a"), P1, "r0", now=0.0)
        assert s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=20.0) is None
        assert s.join.waiting() == {"result": 0, "label": 1}
    assert s.outcome("agreed") == 0
    kind = "label" if label_first else "result"
    assert s.v("evalstream_labels_unmatched_total", kind=kind, reason="expired") == 1


def test_a_matched_result_expiring_is_not_counted_as_unmatched() -> None:
    s = Store(retention_s=1.0)
    s.join.add_result(binary("a"), P1, "r0", now=0.0)
    s.join.add_label(HumanLabel("a", "true"), P0, "l0", now=0.5)
    s.join.expire(now=5.0)
    assert s.v("evalstream_labels_unmatched_total", kind="result", reason="expired") == 0
    assert s.join.waiting() == {"result": 0, "label": 0}
    # Forgotten once expired: a label arriving now waits (it can no longer be recognised).
    s.join.add_label(HumanLabel("a", "false"), P0, "l1", now=5.0)
    assert s.join.waiting() == {"result": 0, "label": 1}


def test_the_oldest_entries_are_evicted_when_full() -> None:
    s = Store(max_results=2, max_labels=1)
    for i in range(3):
        s.join.add_result(binary(f"r{i}"), P1, f"r{i}", now=float(i))
    assert s.released == ["r0"]
    assert s.v("evalstream_labels_unmatched_total", kind="result", reason="evicted") == 1
    s.join.add_label(HumanLabel("x", "true"), P0, "lx", now=3.0)
    s.join.add_label(HumanLabel("y", "true"), P0, "ly", now=3.0)
    assert s.released == ["r0", "lx"]
    assert s.v("evalstream_labels_unmatched_total", kind="label", reason="evicted") == 1
    assert s.join.waiting() == {"result": 2, "label": 1}
    # An evicted result's label finds nothing; a held one's is compared.
    assert s.join.add_label(HumanLabel("r0", "true"), P0, "l0", now=4.0) is None
    assert s.join.add_label(HumanLabel("r2", "true"), P0, "l2", now=4.0) is not None


def test_a_result_matching_a_waiting_label_counts_against_max_results() -> None:
    s = Store(max_results=1)
    s.join.add_result(binary("x"), P1, "rx", now=0.0)
    s.join.add_label(HumanLabel("a", "true"), P0, "la", now=1.0)
    assert s.join.add_result(binary("a"), P1, "ra", now=2.0) is not None
    # The matched result is held (to recognise duplicates): the oldest result goes.
    assert s.v("evalstream_labels_unmatched_total", kind="result", reason="evicted") == 1
    assert sorted(s.released) == ["la", "ra", "rx"]
    assert s.join.waiting() == {"result": 0, "label": 0}


def test_revoked_partitions_drop_their_entries() -> None:
    s = Store()
    s.join.add_result(binary("a"), P1, "ra", now=0.0)
    s.join.add_label(HumanLabel("b", "true"), P0, "lb", now=0.0)
    s.join.add_label(HumanLabel("c", "true"), ("labels", 2), "lc", now=0.0)
    s.join.drop_parts({P0, P1})
    assert sorted(s.released) == ["lb", "ra"]
    assert s.join.waiting() == {"result": 0, "label": 1}
    assert s.v("evalstream_labels_unmatched_total", kind="result", reason="revoked") == 1


def test_invalid_gold_error_results_and_unscored_are_outcomes() -> None:
    s = Store()
    s.join.add_result(binary("a"), P1, "ra", now=0.0)
    assert s.join.add_label(HumanLabel("a", "maybe"), P0, "la", now=0.0) is None
    s.join.add_result(binary("e", status="error"), P1, "re", now=0.0)
    s.join.add_label(HumanLabel("e", "true"), P0, "le", now=0.0)
    unscored = EvalResult(result_id="u", event_id="u", trace_id="u", route="r",
                          evaluator="refusal")
    s.join.add_result(HeldResult("r", "refusal", "builtin", False, slim(unscored)), P1, "ru",
                      now=0.0)
    s.join.add_label(HumanLabel("u", "true"), P0, "lu", now=0.0)
    assert (s.outcome("invalid_gold"), s.outcome("error"), s.outcome("unscored")) == (1, 1, 1)
    assert s.v("evalstream_labels_brier_total", **KEY) == 0


def test_a_label_evaluator_is_compared_on_its_probabilities() -> None:
    s = Store()
    result = EvalResult(result_id="t", event_id="t", trace_id="t", route="r",
                        evaluator="topic", label="billing",
                        probabilities={"billing": 0.6, "shipping": 0.4})
    s.join.add_result(HeldResult("r", "topic", "gpt", True, slim(result)), P1, "rt", now=0.0)
    comparison = s.join.add_label(HumanLabel("t", "shipping"), P0, "lt", now=0.0)
    assert comparison == compare(result, "shipping")
    keys = {"route": "r", "evaluator": "topic", "judge": "gpt"}
    assert s.v("evalstream_labels_brier_total", **keys) == pytest.approx(0.6**2 + 0.6**2)
    assert s.v("evalstream_labels_evaluations_total", **keys, outcome="disagreed") == 1


def test_agreement_brier_and_ece_on_a_hand_computed_example() -> None:
    # (passed, p(pass), gold) -> correct, Brier (p - gold)^2, confidence in the verdict:
    cases = [(True, 0.9, "true"),     # yes, 0.01,   0.9  (bin 0.9)
             (True, 0.8, "false"),    # no,  0.64,   0.8  (bin 0.8)
             (False, 0.3, "false"),   # yes, 0.09,   0.7  (bin 0.7)
             (False, 0.25, "false")]  # yes, 0.0625, 0.75 (bin 0.7)
    s = Store()
    for i, (passed, score, gold) in enumerate(cases):
        s.join.add_result(binary(f"h{i}", passed=passed, score=score), P1, f"r{i}", now=0.0)
        s.join.add_label(HumanLabel(f"h{i}", gold), P0, f"l{i}", now=0.0)

    def per_bin(name: str) -> dict[str, float]:
        return {b: s.v(f"evalstream_labels_calibration_{name}_total", **KEY, bin=b)
                for b in BIN_LABELS}
    n = sum(per_bin("results").values())
    correct, confidence = per_bin("correct"), per_bin("confidence")
    # The README's PromQL, on these counters.
    assert s.outcome("agreed") / n == 3 / 4
    assert s.v("evalstream_labels_brier_total", **KEY) / n == pytest.approx(0.8025 / 4)
    ece = sum(abs(correct[b] - confidence[b]) for b in BIN_LABELS) / n
    # |1 - 0.9| + |0 - 0.8| + |2 - 1.45|, over 4.
    assert ece == pytest.approx((0.1 + 0.8 + 0.55) / 4)


def test_a_class_outside_the_results_label_set_is_invalid_gold() -> None:
    # As for canaries: a typo, another case, or true/false for a label evaluator fits none
    # of its classes. Was: compared as a class, counted as disagreed with a Brier of 1+.
    s = Store()
    keys = {"route": "r", "evaluator": "topic", "judge": "gpt"}
    for i, gold in enumerate(("Billing", "true", "shipping")):
        result = EvalResult(result_id=f"t{i}", event_id="t", trace_id="t", route="r",
                            evaluator="topic", label="billing",
                            probabilities={"billing": 0.6, "shipping": 0.3, "other": 0.1})
        s.join.add_result(HeldResult("r", "topic", "gpt", True, slim(result)), P1, f"r{i}",
                          now=0.0)
        s.join.add_label(HumanLabel(f"t{i}", gold), P0, f"l{i}", now=0.0)
    outcomes = {o: s.v("evalstream_labels_evaluations_total", **keys, outcome=o)
                for o in ("invalid_gold", "disagreed", "agreed")}
    assert outcomes == {"invalid_gold": 2, "disagreed": 1, "agreed": 0}
    assert s.v("evalstream_labels_brier_total", **keys) == pytest.approx(0.36 + 0.49 + 0.01)


@pytest.mark.parametrize(("data", "expected"), [
    (dump_json({"result_id": "a", "gold": "true"}), HumanLabel("a", "true")),
    (dump_json({"result_id": "a", "gold": False, "labeller": "ann"}), HumanLabel("a", "false")),
    (dump_json({"result_id": "a", "gold": True}), HumanLabel("a", "true")),
    (dump_json({"result_id": "a", "gold": "billing"}), HumanLabel("a", "billing")),
    (dump_json({"result_id": "", "gold": "true"}), None),
    (dump_json({"result_id": "a" * 128, "gold": "true"}), HumanLabel("a" * 128, "true")),
    (dump_json({"result_id": "a" * 129, "gold": "true"}), None),
    (dump_json({"result_id": 7, "gold": "true"}), None),
    (dump_json({"result_id": "a"}), None),
    (dump_json({"result_id": "a", "gold": 1}), None),
    (dump_json({"result_id": "a", "gold": "x" * 256}), HumanLabel("a", "x" * 256)),
    # Longer fits no evaluator, and a waiting label would hold it: up to max_labels of them.
    (dump_json({"result_id": "a", "gold": "x" * 257}), None),
    (dump_json(["a", "true"]), None),
    (b"\xff\xfe not json", None),
    (b"", None),
    (None, None),
])
def test_label_messages_are_parsed_without_raising(data: bytes | None,
                                                   expected: HumanLabel | None) -> None:
    assert parse_label(data) == expected


def test_slim_keeps_what_the_comparison_reads() -> None:
    full = EvalResult(result_id="t", event_id="t", trace_id="t", route="r", evaluator="topic",
                      label="billing", probabilities={"billing": 0.6, "shipping": 0.4},
                      reason="long", details={"k": "v"})
    held = slim(full)
    assert not hasattr(held, "reason")
    for gold in ("billing", "shipping"):
        assert compare(held, gold) == compare(full, gold)
    binary_full = EvalResult(result_id="b", event_id="b", trace_id="b", route="r",
                             evaluator="refusal", passed=False, score=0.3)
    assert compare(slim(binary_full), True) == compare(binary_full, True)
