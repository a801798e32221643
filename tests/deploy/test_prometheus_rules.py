"""The Prometheus rules pass `promtool check rules` and their unit tests (spike, quiet,
small-sample), the tests have teeth (each fix undone fails the test groups meant to catch it,
run alone), and the Helm chart ships an identical copy."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yaml"
TESTS = ROOT / "deploy" / "prometheus" / "tests.yaml"
HELM_RULES = ROOT / "helm" / "evalstream" / "files" / "prometheus-rules.yaml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install the Debian package `prometheus`")
    return path


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False)


def test_rules_are_valid() -> None:
    proc = run_promtool("check", "rules", str(RULES), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_rule_unit_tests_pass() -> None:
    proc = run_promtool("test", "rules", str(TESTS), cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_unit_tests_cover_spike_quiet_and_small_sample() -> None:
    doc = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    fired: set[str] = set()
    silent: set[str] = set()
    for case in doc["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else silent).add(check["alertname"])
    assert {"EvalstreamOffTopicSpike", "EvalstreamPassRateDrop",
            "EvalstreamDriftDetected"} <= fired
    assert {"EvalstreamOffTopicSpike", "EvalstreamPassRateDrop"} <= silent
    # Canary agreement: fires on a degraded judge, quiet at the floor and on few canaries.
    assert "EvalstreamCanaryAgreementLow" in fired
    assert "EvalstreamCanaryAgreementLow" in silent
    # Availability alerts: each shown firing, and quiet on healthy input.
    availability = {"EvalstreamDown", "EvalstreamTargetDown", "EvalstreamOffsetCommitErrors",
                    "EvalstreamJudgeCircuitOpen", "EvalstreamJudgeErrors",
                    "EvalstreamJudgeSpendCapReached", "EvalstreamJudgeRateLimited",
                    "EvalstreamJudgeLogprobsLost", "EvalstreamObserverFailing",
                    "EvalstreamLabelsLost"}
    assert availability <= fired
    assert availability <= silent
    # Session windows cut short: fires on a steady share, quiet on few windows.
    assert "EvalstreamSessionsCutShort" in fired
    assert "EvalstreamSessionsCutShort" in silent
    # OTel copies given up: fires on a rejection, quiet on standing counts and restarts.
    assert "EvalstreamOtelResultsRejected" in fired
    assert "EvalstreamOtelResultsRejected" in silent


def group_files(directory: Path, rules: str, groups: tuple[str, ...]) -> list[str]:
    """Write `rules`, and each tests.yaml group named in `groups` as a test file of its own,
    to `directory`; return the test files' names.

    promtool 2.42 has no flag selecting test groups, and the whole tests.yaml takes ~18 s
    a run, so a breakage runs just the group(s) meant to catch it. One file per group: the
    failure of an `exp_samples` check does not name its group, its file does.
    """
    doc = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    by_name = {case["name"]: case for case in doc["tests"]}
    assert set(groups) <= set(by_name), sorted(set(groups) - set(by_name))
    (directory / "rules.yaml").write_text(rules, encoding="utf-8")
    names = []
    for group in groups:
        # rule_files resolve against the test file's directory: the copy beside it.
        reduced = {**doc, "rule_files": ["rules.yaml"], "tests": [by_name[group]]}
        name = f"tests-{group}.yaml"
        (directory / name).write_text(yaml.safe_dump(reduced, sort_keys=False, width=1000),
                                      encoding="utf-8")
        names.append(name)
    return names


def run_groups(directory: Path, files: list[str]) -> dict[str, str]:
    """Run promtool once on `files`; return each file's report ("SUCCESS" or the failures)."""
    # promtool prints "Unit Testing:" on stdout but FAILED and the failures on stderr:
    # one pipe for both keeps each report after its file's header.
    proc = subprocess.run([promtool(), "test", "rules", *files], cwd=directory, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                          check=False)
    reports = dict(re.findall(r"^Unit Testing: +(\S+)\n(.*?)(?=^Unit Testing:|\Z)",
                              proc.stdout, re.MULTILINE | re.DOTALL))
    assert set(reports) == set(files), proc.stdout
    # A rule file that does not resolve is only a warning: every expected alert then fails.
    assert "no file match pattern" not in proc.stdout, proc.stdout
    assert (proc.returncode == 0) == all("SUCCESS" in r for r in reports.values()), proc.stdout
    return reports


LOGPROBS_BEFORE = ('increase(evalstream_judge_answers_total{source="logprobs"}[1d] '
                   'offset 30m))')
MIX_SEVERITY = """severity: '{{ if eq $labels.kind "label_mix" }}info{{ else }}warning{{ end }}'"""
JUDGE_FINISHED = 'rate(evalstream_judge_requests_total{outcome=~"ok|error|deadline"}[5m])'

#: (id, text in rules.yaml, its broken replacement, the tests.yaml groups that must catch it).
#: Each group named must fail, and the groups run are exactly these.
BREAKAGES: list[tuple[str, str, str, tuple[str, ...]]] = [
    # Minimum-n guards: without them a trickle of events gives a 100% share / 0% pass
    # rate (or a thin baseline, few canaries, few session windows) that fires.
    ("guard-label-share", "and route:evalstream_topic_labels:effective_n5m >= 30", "",
     ("small-sample",)),
    ("guard-pass-rate", "and route_evaluator:evalstream_evaluations:effective_n5m >= 30", "",
     ("small-sample", "few-heavy-weights")),
    ("guard-baseline", "and (route:evalstream_topic_labels:effective_n1h offset 5m) >= 100", "",
     ("thin-baseline",)),
    ("guard-canaries", "and route_evaluator_judge:evalstream_canary_compared:increase1h >= 20",
     "", ("few-canaries",)),
    ("guard-sessions", "and ignoring (reason) route:evalstream_sessions_closed:increase1h >= 20",
     "", ("sessions-few-windows",)),
    # With route strata one series mixes sample rates: the tests pin the effective sample
    # size (sum w)^2 / sum w^2 and the weighted label share.
    # Wilson bounds from the raw count: too narrow on a series mixing sample rates, so a
    # dip the effective sample cannot resolve fires EvalstreamPassRateDrop.
    ("pass-rate-bounds", "/ route_evaluator:evalstream_pass_rate:interval_n5m",
     "/ route_evaluator:evalstream_evaluations:increase5m", ("mixed-rate-no-drop",)),
    # Bounds on Kish's n alone: too narrow where a rarely sampled stratum's pass rate
    # differs from the rest (the figures change).
    ("interval-n-linearised", "/ route_evaluator:evalstream_pass_rate:interval_n5m",
     "/ route_evaluator:evalstream_evaluations:effective_n5m",
     ("mixed-rate-interval-n", "mixed-rate-no-drop")),
    # The linearised n alone: a rare stratum's few results, all failing, read as certain
    # (71.6 where Kish's n is 5.7).
    ("interval-n-min", "            < route_evaluator:evalstream_evaluations:effective_n5m\n",
     "            > 0\n", ("few-heavy-weights",)),
    # Without Kish's n to fall back on, no bounds at a pass rate of 1 (no failed weight)
    # nor from a worker without squared weights, so no EvalstreamPassRateDrop from it.
    ("interval-n-fallback", "          or route_evaluator:evalstream_evaluations:effective_n5m\n"
     "      - record: route_evaluator:evalstream_pass_rate:ratio_rate5m\n",
     "      - record: route_evaluator:evalstream_pass_rate:ratio_rate5m\n",
     ("mixed-rate-interval-n", "pass-rate-drop")),
    # The minimum-n guard on the raw count: 40 results, 5.7 effective, fire.
    ("pass-rate-guard", "and route_evaluator:evalstream_evaluations:effective_n5m >= 30",
     "and route_evaluator:evalstream_evaluations:increase5m >= 30", ("few-heavy-weights",)),
    # The share from unweighted labels leans to the most sampled stratum: a spike in a
    # rarely sampled one (most of the traffic) is missed.
    ("label-share", "increase(evalstream_labels_weighted_total{",
     "increase(evalstream_labels_total{", ("mixed-rate-labels",)),
    # The share's bound from the raw label count: too narrow (the figure changes).
    ("label-share-bound", "/ route:evalstream_topic_labels:effective_n5m",
     "/ route:evalstream_topic_labels:increase5m", ("mixed-rate-labels",)),
    # Availability and denominator fixes.
    # Dividing by every attempt (retry, rate_limited too) dilutes the failure share.
    ("judge-denominator", JUDGE_FINISHED, "rate(evalstream_judge_requests_total[5m])",
     ("judge-errors-finished-calls", "judge-outage")),
    # Without absent() a fleet whose series all vanished (dead or hung) never alerts.
    ("absent", "or absent(evalstream_ready unless on (job, instance) evalstream_labels_pending)",
     "", ("all-gone",)),
    # A ready label joiner kept EvalstreamDown quiet beside dead workers, and its lag (an
    # hour of results waiting for labels, by design) fired EvalstreamConsumerLagHigh.
    ("joiner-excluded", " unless on (job, instance) evalstream_labels_pending", "",
     ("label-joiner", "dead-letters")),
    # Summed over every release a Prometheus scrapes, a release that is down stayed silent
    # beside one that is up, and two releases' lag added up to a page neither deserved.
    ("per-release-down", "sum by (namespace, service) (", "sum(", ("two-releases",)),
    ("per-release-lag", "sum by (namespace, service, topic) (", "sum by (topic) (",
     ("two-releases",)),
    # A job selector that only knows one naming misses the operator's default job name.
    ("job-selector", 'up{job=~".*evalstream.*"}', 'up{job="evalstream"}', ("all-gone",)),
    # Alerting on any commit error pages on every rebalance.
    ("commit-ratio", ">= sum without (outcome) (", "> 0 * sum without (outcome) (",
     ("offset-commits",)),
    # Without "answered from logprobs before", a judge set to logprobs: never (JSON by
    # design) pages; without the minimum count, a judge asked a question now and then.
    ("logprobs-before", f"{LOGPROBS_BEFORE} > 0", f"{LOGPROBS_BEFORE} >= 0", ("logprobs-lost",)),
    ("logprobs-min-n", "and sum by (judge) (increase(evalstream_judge_answers_total[30m])) >= 20",
     "", ("logprobs-lost",)),
    # A breaker that closes in between is not stuck open.
    ("circuit-min", "min_over_time(evalstream_judge_circuit_state",
     "max_over_time(evalstream_judge_circuit_state", ("circuit-breakers",)),
    # ECE takes |correct - confidence| per bin over ALL replicas: per replica, the over-
    # and under-confidence of two replicas' halves of a bin would add instead of cancel.
    ("ece-per-bin", "sum by (route, evaluator, judge, bin) (",
     "sum by (route, evaluator, judge, bin, instance) (", ("canary-calibration",)),
    # The label-mix G-test fires on any change of the mix, a benign one included: the
    # worker ranks it info, and as a warning it paged on-call for a harmless shift.
    ("drift-mix-info", MIX_SEVERITY, "severity: warning", ("drift-label-mix-info",)),
]


@pytest.mark.parametrize(("fixed", "broken", "groups"), [b[1:] for b in BREAKAGES],
                         ids=[b[0] for b in BREAKAGES])
def test_promtool_tests_fail_without_the_fix(tmp_path: Path, fixed: str, broken: str,
                                             groups: tuple[str, ...]) -> None:
    """Each guard, weighting and availability fix is pinned by the promtool test group(s)
    meant to catch it: with the fix undone, every one of those groups fails."""
    text = RULES.read_text(encoding="utf-8")
    assert fixed in text
    files = group_files(tmp_path, text.replace(fixed, broken), groups)
    for name, report in run_groups(tmp_path, files).items():
        assert "FAILED" in report, f"{name} did not notice {broken!r} for {fixed!r}"


def test_selected_groups_pass_on_the_real_rules(tmp_path: Path) -> None:
    """The reduced test files the breakage tests run pass on the unbroken rules, so their
    failures come from the breakage, not from the reduction (a bad path, a lost check)."""
    groups = tuple(sorted({g for b in BREAKAGES for g in b[3]}))
    files = group_files(tmp_path, RULES.read_text(encoding="utf-8"), groups)
    for name in files:
        doc = yaml.safe_load((tmp_path / name).read_text(encoding="utf-8"))
        assert len(doc["tests"]) == 1, name
    for name, report in run_groups(tmp_path, files).items():
        assert "SUCCESS" in report, (name, report)


def test_test_groups_are_named_uniquely() -> None:
    """The breakage tests select groups by name: every group needs a distinct one."""
    doc = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    names = [case.get("name") for case in doc["tests"]]
    assert all(names), "every tests.yaml group needs a name"
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)


def metric_labels() -> dict[str, frozenset[str]]:
    """Every exported sample name -> its label names, from evalstream.metrics itself."""
    from prometheus_client import Counter, Gauge, Histogram, Info

    from evalstream.metrics import Metrics

    out: dict[str, frozenset[str]] = {}
    for collector in vars(Metrics()).values():
        if not isinstance(collector, Counter | Gauge | Histogram | Info):
            continue
        # prometheus_client has no public accessor for a collector's label names.
        name = collector._name  # the registered name, without the type's suffixes
        labels = frozenset(collector._labelnames)
        if isinstance(collector, Counter):
            names = [f"{name}_total"]
        elif isinstance(collector, Histogram):
            names = [f"{name}_bucket", f"{name}_sum", f"{name}_count"]
            labels |= {"le"}
        elif isinstance(collector, Info):
            names = [f"{name}_info"]
        else:
            names = [name]
        out.update(dict.fromkeys(names, labels))
    return out


SELECTOR = re.compile(r"(?<![:\w])(evalstream_[a-z0-9_]+)(?![:\w])(\{[^}]*\})?")


def test_rules_use_only_exported_metrics_and_labels() -> None:
    """Every evalstream_* metric the rules read exists, with the labels they match on."""
    exported = metric_labels()
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    seen = set()
    for rule in (r for g in doc["groups"] for r in g["rules"]):
        for name, matchers in SELECTOR.findall(str(rule["expr"])):
            assert name in exported, f"{rule.get('alert') or rule.get('record')}: {name}"
            used = set(re.findall(r"([a-zA-Z_]\w*)\s*[=!]~?", matchers))
            assert used <= exported[name], (name, used - exported[name])
            seen.add(name)
    assert {"evalstream_ready", "evalstream_offset_commits_total",
            "evalstream_judge_circuit_state"} <= seen


def test_every_alert_is_labelled_and_explained() -> None:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 6
    for rule in alerts:
        severity = rule["labels"]["severity"]
        # A severity templated on the alert's labels: every value it can give is known.
        values = set(re.findall(r"\}\}(\w*)\{\{", severity)) if "{{" in severity else {severity}
        assert values, rule["alert"]
        assert values <= {"info", "warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["description"], rule["alert"]
    # Recording rules follow level:metric:operations naming.
    records = [r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r]
    assert all(re.fullmatch(r"[a-z_]+:evalstream_[a-z0-9_]+:[a-z0-9_]+", r) for r in records)


def test_helm_chart_ships_the_same_rules() -> None:
    assert HELM_RULES.read_bytes() == RULES.read_bytes(), (
        "helm/evalstream/files/prometheus-rules.yaml is stale: run deploy/grafana/generate.py")


#: A recorded series' name: level:metric:operations (the rules' naming convention).
RECORDED = re.compile(r"\b[a-z_]+:evalstream_[a-z0-9_]+:[a-z0-9_]+\b")


def recorded_names() -> set[str]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return {r["record"] for g in doc["groups"] for r in g["rules"] if "record" in r}


def test_rules_read_only_recorded_series() -> None:
    """The per-replica metrics are checked above; a recorded series an alert reads must be
    recorded here too, or the alert silently never fires."""
    recorded = recorded_names()
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    used = {name for g in doc["groups"] for r in g["rules"]
            for name in RECORDED.findall(str(r["expr"]))}
    assert used, "the alerts read recorded series"
    assert used <= recorded, sorted(used - recorded)


def test_alerts_sit_in_the_group_recording_what_they_read() -> None:
    """A group's rules run in order, groups in no fixed order (promtool picks one at random
    each run). An alert reading another group's recorded series may see the previous
    evaluation's value: EvalstreamCanaryAgreementLow's unit test failed about one run in
    five that way (agreement 44.81% instead of 43.97%)."""
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    group_of = {r["record"]: g["name"] for g in doc["groups"] for r in g["rules"]
                if "record" in r}
    checked = []
    for group in doc["groups"]:
        for rule in (r for r in group["rules"] if "alert" in r):
            for name in RECORDED.findall(str(rule["expr"])):
                assert group_of[name] == group["name"], (rule["alert"], name, group_of[name])
                checked.append(rule["alert"])
    assert {"EvalstreamCanaryAgreementLow", "EvalstreamSessionsCutShort",
            "EvalstreamPassRateDrop"} <= set(checked)
