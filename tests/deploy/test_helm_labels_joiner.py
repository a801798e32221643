"""The chart's optional ``evalstream join-labels`` Deployment (``labelsJoiner``).

Rendered offline with ``helm-python-sdk`` (as in ``test_helm.py``). The joiner's pods must
never be selected by a worker selector (Service, PodDisruptionBudget, ServiceMonitor,
topology spread), and turning it on must leave the worker Deployment's immutable
``spec.selector`` exactly as before.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import certifi
import helm_python as helm
import pytest
import yaml

from tests.deploy.test_helm import (
    ALL_ON,
    CHART,
    EVALSTREAM,
    KUBE_VERSION,
    Manifest,
    render,
    validate_manifest,
)

WORKER = "es-evalstream"
JOINER = "es-evalstream-labels"
# The worker Deployment's selector as chart 0.1.x rendered it for release "es": immutable
# in Kubernetes, so `helm upgrade` of an existing install fails if it ever changes.
WORKER_SELECTOR = {"app.kubernetes.io/name": "evalstream", "app.kubernetes.io/instance": "es"}


def _joiner_values(base: dict[str, Any] | None = None) -> dict[str, Any]:
    values = copy.deepcopy(base) if base else {}
    values["labelsJoiner"] = {"enabled": True}
    values.setdefault("config", {})["labels"] = {"topic": "human.labels"}
    return values


ALL_ON_JOINER = _joiner_values(ALL_ON)


def _named(docs: list[Manifest], kind: str, name: str) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
    return found[0]


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """Whether matchLabels ``selector`` selects an object labelled ``labels``."""
    return selector.items() <= labels.items()


@pytest.fixture(scope="module")
def joiner_docs() -> list[Manifest]:
    return render(ALL_ON_JOINER)


@pytest.mark.parametrize("base", [None, ALL_ON], ids=["default", "all-on"])
def test_joiner_exists_only_when_enabled(base: dict[str, Any] | None) -> None:
    off = render(base)
    assert [d["metadata"]["name"] for d in off if d["kind"] == "Deployment"] == [WORKER]
    assert not [d for d in off if JOINER in d["metadata"]["name"]]
    on = render(_joiner_values(base))
    assert sorted(d["metadata"]["name"] for d in on if d["kind"] == "Deployment") == [
        WORKER, JOINER]
    assert _named(on, "Service", JOINER)["spec"]["selector"] == _named(
        on, "Deployment", JOINER)["spec"]["selector"]["matchLabels"]


def test_joiner_lints_and_validates(joiner_docs: list[Manifest]) -> None:
    report = helm.lint(CHART, ALL_ON_JOINER, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report
    for doc in joiner_docs:
        validate_manifest(doc)


def test_worker_selectors_never_select_the_joiner(joiner_docs: list[Manifest]) -> None:
    pod_labels = _named(joiner_docs, "Deployment", JOINER)["spec"]["template"]["metadata"][
        "labels"]
    worker = _named(joiner_docs, "Deployment", WORKER)
    worker_pod = worker["spec"]["template"]
    selectors = {
        "Deployment": worker["spec"]["selector"]["matchLabels"],
        "Service": _named(joiner_docs, "Service", WORKER)["spec"]["selector"],
        "PodDisruptionBudget": _named(joiner_docs, "PodDisruptionBudget", WORKER)["spec"][
            "selector"]["matchLabels"],
        "topologySpread": worker_pod["spec"]["topologySpreadConstraints"][0]["labelSelector"][
            "matchLabels"],
    }
    for what, selector in selectors.items():
        assert _selects(selector, worker_pod["metadata"]["labels"]), what  # the comparison works
        assert not _selects(selector, pod_labels), what
    # The workers' ServiceMonitor selects Services: only the workers' one.
    monitor = _named(joiner_docs, "ServiceMonitor", WORKER)["spec"]["selector"]["matchLabels"]
    services = [d for d in joiner_docs if d["kind"] == "Service"]
    assert [s["metadata"]["name"] for s in services
            if _selects(monitor, s["metadata"]["labels"])] == [WORKER]
    # The autoscaler scales the workers' Deployment by name, never the joiner's.
    scaled = _named(joiner_docs, "ScaledObject", WORKER)["spec"]["scaleTargetRef"]
    assert scaled["name"] == WORKER
    # And the joiner's own selectors take no worker pod.
    joiner_monitor = _named(joiner_docs, "ServiceMonitor", JOINER)["spec"]["selector"][
        "matchLabels"]
    assert [s["metadata"]["name"] for s in services
            if _selects(joiner_monitor, s["metadata"]["labels"])] == [JOINER]
    assert not _selects(_named(joiner_docs, "Service", JOINER)["spec"]["selector"],
                        worker_pod["metadata"]["labels"])


@pytest.mark.parametrize("base", [None, ALL_ON], ids=["default", "all-on"])
def test_worker_deployment_selector_is_unchanged(base: dict[str, Any] | None) -> None:
    for values in (base, _joiner_values(base)):
        worker = _named(render(values), "Deployment", WORKER)
        assert worker["spec"]["selector"] == {"matchLabels": WORKER_SELECTOR}


def test_worker_deployment_is_untouched_by_the_joiner() -> None:
    # Not only the selector: enabling the joiner must not roll or alter the workers
    # (the config checksum differs only because config.labels was added to the config).
    values = {"config": {"labels": {"topic": "human.labels"}}}
    off = _named(render(values), "Deployment", WORKER)
    on = _named(render({**values, "labelsJoiner": {"enabled": True}}), "Deployment", WORKER)
    assert off == on


def test_joiner_runs_join_labels_with_the_workers_config_and_secrets(
    joiner_docs: list[Manifest],
) -> None:
    joiner = _named(joiner_docs, "Deployment", JOINER)
    worker = _named(joiner_docs, "Deployment", WORKER)
    assert joiner["spec"]["replicas"] == 1
    assert joiner["spec"]["strategy"] == {"type": "Recreate"}
    pod, wpod = joiner["spec"]["template"]["spec"], worker["spec"]["template"]["spec"]
    (c,), (w,) = pod["containers"], wpod["containers"]
    assert c["args"] == ["join-labels", "--config", "/etc/evalstream/config.yaml"]
    assert c["image"] == w["image"]
    for key in ("env", "envFrom", "volumeMounts", "securityContext", "ports"):
        assert c[key] == w[key], key
    assert pod["volumes"] == wpod["volumes"]
    assert pod["securityContext"] == wpod["securityContext"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert joiner["spec"]["template"]["metadata"]["annotations"]["checksum/config"] == worker[
        "spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    # Scraped with the workers' ServiceMonitor settings, on its own Service.
    monitor = _named(joiner_docs, "ServiceMonitor", JOINER)
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = _named(joiner_docs, "Service", JOINER)
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "evalstream-labels"


def test_joiner_service_monitor_follows_service_monitor_enabled() -> None:
    docs = render(_joiner_values())
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    _named(docs, "Service", JOINER)  # the Service is there for port-forward and scrapes


def test_rendered_joiner_config_passes_check_config(
    joiner_docs: list[Manifest], tmp_path: Path
) -> None:
    cm = next(d for d in joiner_docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"])
    config = tmp_path / "config.yaml"
    config.write_text(cm["data"]["config.yaml"].replace("/etc/kafka-ca/ca.crt",
                                                        certifi.where()), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTREAM_")}
    container = _named(joiner_docs, "Deployment", JOINER)["spec"]["template"]["spec"][
        "containers"][0]
    for var in container["env"]:
        if "valueFrom" in var:
            env[var["name"]] = "placeholder"
    proc = subprocess.run([str(EVALSTREAM), "check-config", str(config)], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "human.labels" in proc.stdout


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"labelsJoiner": {"enabled": True}}, "config.labels.topic is not set"),
        ({"labelsJoiner": {"enabled": True}, "config": {"labels": {"retention_s": 7200}}},
         "config.labels.topic is not set"),
        ({"labelsJoiner": {"enabled": True, "replicas": 2}}, "'replicas' not allowed"),
        ({"labelsJoiner": {"enable": True}}, "'enable' not allowed"),
        ({"labelsJoiner": {"enabled": True, "podLabels": {"app.kubernetes.io/name": "x"}},
          "config": {"labels": {"topic": "t"}}}, "invalid propertyName 'app.kubernetes.io/name'"),
    ],
    ids=["no-labels-section", "no-labels-topic", "schema-replicas", "schema-typo",
         "schema-selector-label"],
)
def test_joiner_without_what_it_needs_fails_to_render(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


@pytest.mark.parametrize(
    "extra",
    [{"extraEnv": [{"name": "EVALSTREAM_LABELS__TOPIC", "value": "human.labels"}]},
     {"extraEnvFrom": [{"configMapRef": {"name": "labels-env"}}]}],
    ids=["extra-env", "extra-env-from"],
)
def test_labels_topic_from_the_environment_is_accepted(extra: dict[str, Any]) -> None:
    docs = render({"labelsJoiner": {"enabled": True}, **extra})
    _named(docs, "Deployment", JOINER)


def test_chart_version_was_bumped_for_the_new_values_key() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    major, minor, _ = (int(x) for x in chart["version"].split("."))
    assert (major, minor) >= (0, 2)
