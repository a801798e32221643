"""The Helm chart renders, lints and validates, offline, for default and all-on values.

Rendering and linting use ``helm-python-sdk`` (Helm's Go SDK through a C ABI: no helm
binary, no cluster). Built-in kinds are validated with ``kubernetes-validate`` (strict:
unknown fields fail); custom resources against the CRD subsets in ``crd_schemas``. The
rendered ConfigMap must hold a config that ``evalstream check-config`` accepts.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import certifi
import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.crd_schemas import CRD_SCHEMAS

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "evalstream"
ALL_ON = yaml.safe_load((CHART / "ci" / "all-on-values.yaml").read_text(encoding="utf-8"))
KUBE_VERSION = "1.30.0"
EVALSTREAM = Path(sys.executable).with_name("evalstream")

Manifest = dict[str, Any]


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """Render the chart like ``helm template es . -n llm`` and parse every document."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values, name="es", namespace="llm")
    docs: list[Manifest] = []
    for path, text in files.items():
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def one(docs: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [d for d in docs if d["kind"] == kind and (name is None or
                                                        d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


@pytest.fixture(scope="module")
def default_docs() -> list[Manifest]:
    return render()


@pytest.fixture(scope="module")
def all_on_docs() -> list[Manifest]:
    return render(ALL_ON)


# --- lint and schema validation ------------------------------------------------------------

@pytest.mark.parametrize("values", [None, ALL_ON], ids=["default", "all-on"])
def test_chart_lints_clean_in_strict_mode(values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [], report
    assert problems == [], report


def validate_manifest(doc: Manifest) -> None:
    """Validate one rendered manifest: a custom resource against its CRD subset
    (``crd_schemas.py``), a built-in kind with kubernetes-validate."""
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        jsonschema.validate(doc, CRD_SCHEMAS[key])
    else:
        # strict: a misspelt or misplaced field is an error, not silently dropped.
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("which", ["default", "all-on"])
def test_every_manifest_validates(which: str, request: pytest.FixtureRequest) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which.replace('-', '_')}_docs")
    checked: list[str] = []
    for doc in docs:
        validate_manifest(doc)
        checked.append(doc["kind"])
    expected = {"ConfigMap", "Deployment", "Service", "ServiceAccount"}
    if which == "all-on":
        expected |= {"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget",
                     "ScaledObject", "TriggerAuthentication"}
    assert expected <= set(checked), checked


def test_hpa_variant_validates() -> None:
    values = {"autoscaling": {"hpa": {"enabled": True, "maxReplicas": 4}}}
    docs = render(values)
    hpa = one(docs, "HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, KUBE_VERSION, strict=True)
    assert hpa["spec"]["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    assert "replicas" not in one(docs, "Deployment")["spec"]  # the HPA owns the count


def test_crd_subset_schemas_reject_known_mistakes(all_on_docs: list[Manifest]) -> None:
    """The hand-written CRD subsets must be able to fail, or they check nothing."""
    scaled = json.loads(json.dumps(one(all_on_docs, "ScaledObject")))
    scaled["spec"]["triggers"][0]["metadata"]["lagThreshold"] = 1000  # KEDA wants strings
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, CRD_SCHEMAS[("keda.sh/v1alpha1", "ScaledObject")])
    monitor = json.loads(json.dumps(one(all_on_docs, "ServiceMonitor")))
    monitor["spec"]["endpoints"][0]["interval"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, CRD_SCHEMAS[("monitoring.coreos.com/v1", "ServiceMonitor")])


# --- the config the pods read -------------------------------------------------------------

def _rendered_config(docs: list[Manifest]) -> str:
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"])
    text: str = cm["data"]["config.yaml"]
    return text


@pytest.mark.parametrize("which", ["default", "all-on"])
def test_rendered_config_passes_check_config(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which.replace('-', '_')}_docs")
    config = tmp_path / "config.yaml"
    # The pod mounts the CA bundle; check-config loads ssl_cafile, so use a real one here.
    text = _rendered_config(docs).replace("/etc/kafka-ca/ca.crt", certifi.where())
    config.write_text(text, encoding="utf-8")
    # The pod gets these from secretKeyRefs; here they are placeholders of the same names.
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALSTREAM_")}
    deployment = one(docs, "Deployment")
    secrets = []
    for var in deployment["spec"]["template"]["spec"]["containers"][0].get("env", []):
        if "valueFrom" in var:
            env[var["name"]] = f"placeholder-{var['name'].lower()}"
            if not var["name"].endswith("USERNAME"):
                secrets.append(env[var["name"]])
    proc = subprocess.run(
        [str(EVALSTREAM), "check-config", str(config)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for secret in secrets:  # check-config prints the effective config: masked
        assert secret not in proc.stdout + proc.stderr
    if which == "all-on":
        assert len(secrets) == 2  # the SASL password and the judge's API key


def test_config_map_holds_values_config_verbatim(all_on_docs: list[Manifest]) -> None:
    assert yaml.safe_load(_rendered_config(all_on_docs)) == ALL_ON["config"]


def test_config_change_rolls_the_pods() -> None:
    a = one(render(), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    b = one(render({"config": {"sampling": {"rate": 0.5}}}), "Deployment")
    b_ann = b["spec"]["template"]["metadata"]["annotations"]
    assert len(a["checksum/config"]) == 64
    assert a["checksum/config"] != b_ann["checksum/config"]


# --- pod hardening, probes, shutdown ------------------------------------------------------

def test_pod_is_hardened_and_probed(default_docs: list[Manifest]) -> None:
    pod = one(default_docs, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    sc = container["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["args"] == ["run", "--config", "/etc/evalstream/config.yaml"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/etc/evalstream", "/tmp"} <= mounts
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False


def test_rollout_replaces_before_it_surges(default_docs: list[Manifest]) -> None:
    # /readyz needs assigned partitions; a surge pod may get none when replicas equal
    # partitions and would never become ready, so the old pod must leave first.
    rolling = one(default_docs, "Deployment")["spec"]["strategy"]["rollingUpdate"]
    assert rolling == {"maxSurge": 0, "maxUnavailable": 1}


@pytest.mark.parametrize("which", ["default", "all-on"])
def test_grace_period_outlasts_the_worker_drain(
    which: str, request: pytest.FixtureRequest
) -> None:
    docs: list[Manifest] = request.getfixturevalue(f"{which.replace('-', '_')}_docs")
    drain = yaml.safe_load(_rendered_config(docs))["worker"]["shutdown_timeout_s"]
    grace = one(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > drain


def test_grace_period_fits_the_whole_stop_not_only_the_drain() -> None:
    """After the drain the worker flushes results, commits and closes within a budget of
    its own (``app/shutdown.py``); a grace period covering only the drain killed it there,
    so the drained work was neither durable nor committed, and was evaluated again."""
    from evalstream.app.shutdown import _CLOSE_BUDGET_S, _CLOSE_STEP_MIN_S

    # Eight steps after the drain (observers, flush, commit, five closes) may each take
    # their minimum once the budget is spent.
    finish = _CLOSE_BUDGET_S + 8 * _CLOSE_STEP_MIN_S
    default = one(render(), "Deployment")["spec"]["template"]["spec"]
    assert default["terminationGracePeriodSeconds"] >= 25 + finish
    too_short = 25 + math.ceil(_CLOSE_BUDGET_S)  # past the drain, short of the finish
    with pytest.raises(helm.HelmError, match="flush results, commit offsets and close"):
        render({"terminationGracePeriodSeconds": too_short})
    enough = one(render({"terminationGracePeriodSeconds": 40}), "Deployment")
    assert enough["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 40


def test_metrics_port_follows_the_config() -> None:
    docs = render({"config": {"server": {"port": 9100}}})
    ports = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}]


# --- secrets stay secret --------------------------------------------------------------------

def test_credentials_come_only_from_existing_secrets(all_on_docs: list[Manifest]) -> None:
    assert not [d for d in all_on_docs if d["kind"] == "Secret"]
    env = one(all_on_docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e}
    assert refs["EVALSTREAM_KAFKA__SASL_PASSWORD"] == {"name": "kafka-credentials",
                                                      "key": "password"}
    assert refs["OPENAI_API_KEY"] == {"name": "llm-judge", "key": "api-key"}
    auth = one(all_on_docs, "TriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"username": ("kafka-credentials", "username"),
                    "password": ("kafka-credentials", "password"),
                    "ca": ("kafka-ca", "ca.crt")}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"kafka": {"sasl_password": "hunter2"}}}, "sasl_password"),
        ({"config": {"kafka": {"ssl_password": "hunter2"}}}, "config.kafka.ssl_password must not"),
        ({"config": {"judges": {"llm": {"type": "openai", "base_url": "http://x", "model": "m",
                                        "api_key_env": "JUDGE_KEY"}}}}, "JUDGE_KEY"),
        ({"config": {"judges": {"llm": {"type": "openai", "base_url": "http://x", "model": "m",
                                        "api_key": "sk-live"}}}}, "api_key"),
        ({"config": {"kafka": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}}},
         "existingSecret"),
        ({"autoscaling": {"keda": {"enabled": True}, "hpa": {"enabled": True}}}, "at most one"),
        ({"terminationGracePeriodSeconds": 10}, "must be at least"),
        ({"autoscaling": {"keda": {"partitions": "six"}}}, "want integer"),  # values.schema
        ({"secrets": {"judgeApiKeys": [{"env": "KEY"}]}}, "existingSecret"),
        ({"config": {"server": {"host": "127.0.0.1"}}}, "config.server.host"),
        ({"config": {"server": {"host": "localhost"}}}, "all interfaces"),
        ({"autoscaling": {"keda": {"enabled": True, "minReplicaCount": 0}}},
         "allowScaleToZero"),
        ({"autoscaling": {"keda": {"enabled": True, "minReplicaCount": 8, "partitions": 4}}},
         "exceeds the replica cap"),
        ({"autoscaling": {"hpa": {"enabled": True, "minReplicas": 5, "partitions": 4}}},
         "exceeds the replica cap"),
        ({"config": {"kafka": {"security_protocol": "SSL", "ssl_cafile": "/ca/ca.crt"}},
          "autoscaling": {"keda": {"enabled": True}}}, "autoscaling.keda.tls.ca.secretName"),
        ({"config": {"kafka": {"security_protocol": "SSL", "ssl_certfile": "/c/tls.crt",
                               "ssl_keyfile": "/c/tls.key"}},
          "autoscaling": {"keda": {"enabled": True}}}, "client certificate"),
        ({"config": {"kafka": {"security_protocol": "SSL"}},
          "autoscaling": {"keda": {"enabled": True,
                                   "tls": {"cert": {"secretName": "client"}}}}},
         "set together"),
        ({"autoscaling": {"keda": {"enabled": True, "tls": {"ca": {"secretName": "ca"}}}}},
         "PLAINTEXT"),
        ({"config": {"inputs": None}, "autoscaling": {"keda": {"enabled": True}}},
         "config.inputs"),
        ({"autoscaling": {"keda": {"tls": {"ca": {"name": "ca"}}}}}, "additional properties"),
        ({"prometheusRule": {"enabled": True, "topicEvaluator": 'topic"} or vector(1)'}},
         "topicEvaluator"),
        # Misspelt keys: ignored before, so the user silently got no ServiceMonitor/PDB.
        ({"serviceMonitor": {"enable": True}}, "'enable' not allowed"),
        ({"podDisruptionBudget": {"enable": True}}, "'enable' not allowed"),
        ({"replicacount": 3}, "'replicacount' not allowed"),
        # Rendered twice in the pod's labels: the Deployment's selector no longer matched
        # its template, refused by the API server at install, not by the chart.
        ({"podLabels": {"app.kubernetes.io/instance": "other"}}, "podLabels"),
    ],
    ids=["sasl-password-in-values", "ssl-password-in-values", "api-key-env-without-secret",
         "api-key-in-values",
         "sasl-without-secret", "keda-and-hpa", "grace-below-drain", "schema-type",
         "schema-secret-ref", "server-loopback", "server-hostname", "keda-scale-to-zero",
         "keda-min-above-cap", "hpa-min-above-cap", "keda-private-ca-without-ca",
         "keda-mtls-without-cert", "keda-cert-without-key", "keda-tls-without-ssl",
         "keda-without-inputs", "schema-keda-tls", "schema-topic-evaluator",
         "typo-service-monitor", "typo-pdb", "typo-top-level", "pod-label-selector"],
)
def test_dangerous_values_fail_to_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def _undeclared(schema: dict[str, Any], values: Any, path: str = "") -> list[str]:
    """Keys of ``values`` the schema does not declare, where it lists properties."""
    if not isinstance(values, dict) or "properties" not in schema:
        return []
    out = []
    for key, value in values.items():
        if key not in schema["properties"]:
            out.append(f"{path}{key}")
        else:
            out += _undeclared(schema["properties"][key], value, f"{path}{key}.")
    return out


def test_schema_declares_every_value_and_refuses_unknown_top_level_keys() -> None:
    # With additionalProperties: false a value missing from the schema would fail every
    # install; a schema open at the top would let misspelt keys pass silently.
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    assert _undeclared(schema, values) == []
    assert _undeclared(schema, ALL_ON) == []
    assert schema["additionalProperties"] is False
    chart_owned = [k for k, v in schema["properties"].items()
                   if v.get("type") == "object" and "properties" in v]
    assert {"image", "service", "serviceMonitor", "autoscaling"} <= set(chart_owned)
    assert all(schema["properties"][k]["additionalProperties"] is False for k in chart_owned)


# --- observability and scaling add-ons ------------------------------------------------------

def test_keda_caps_replicas_at_partition_count(all_on_docs: list[Manifest]) -> None:
    spec = one(all_on_docs, "ScaledObject")["spec"]
    assert ALL_ON["autoscaling"]["keda"]["maxReplicaCount"] > ALL_ON["autoscaling"]["keda"][
        "partitions"]
    assert spec["maxReplicaCount"] == ALL_ON["autoscaling"]["keda"]["partitions"]
    # One trigger per input topic (the HPA follows the busiest), all authenticated.
    topics = [i["topic"] for i in ALL_ON["config"]["inputs"]]
    assert len(topics) == 2
    assert [t["metadata"]["topic"] for t in spec["triggers"]] == topics
    auth = one(all_on_docs, "TriggerAuthentication")["metadata"]["name"]
    for trigger in spec["triggers"]:
        meta = trigger["metadata"]
        assert meta["consumerGroup"] == ALL_ON["config"]["kafka"]["group_id"]
        assert meta["offsetResetPolicy"] == ALL_ON["config"]["kafka"]["auto_offset_reset"]
        assert meta["sasl"] == "scram_sha512"
        assert meta["tls"] == "enable"
        assert trigger["authenticationRef"] == {"name": auth}
    assert "replicas" not in one(all_on_docs, "Deployment")["spec"]


def _validate_custom(doc: Manifest) -> None:
    jsonschema.validate(doc, CRD_SCHEMAS[(doc["apiVersion"], doc["kind"])])


def test_keda_over_mutual_tls_gets_ca_cert_and_key() -> None:
    """SSL without SASL: the TriggerAuthentication carries only the TLS material."""
    docs = render({
        "config": {"kafka": {"security_protocol": "SSL", "ssl_cafile": "/tls/ca.crt",
                             "ssl_certfile": "/tls/tls.crt", "ssl_keyfile": "/tls/tls.key"}},
        "autoscaling": {"keda": {"enabled": True, "tls": {
            "ca": {"secretName": "kafka-ca"},
            "cert": {"secretName": "kafka-client", "key": "client.pem"},
            "key": {"secretName": "kafka-client", "key": "client-key.pem"}}}},
    })
    auth = one(docs, "TriggerAuthentication")
    _validate_custom(auth)
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {"ca": ("kafka-ca", "ca.crt"), "cert": ("kafka-client", "client.pem"),
                    "key": ("kafka-client", "client-key.pem")}
    scaled = one(docs, "ScaledObject")
    _validate_custom(scaled)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["metadata"]["tls"] == "enable"
    assert "sasl" not in trigger["metadata"]
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]


def test_keda_over_public_ca_tls_needs_no_authentication() -> None:
    """TLS to brokers with a public CA (no ssl_cafile, no SASL): nothing to authenticate."""
    docs = render({"config": {"kafka": {"security_protocol": "SSL"}},
                   "autoscaling": {"keda": {"enabled": True}}})
    assert not [d for d in docs if d["kind"] == "TriggerAuthentication"]
    (trigger,) = one(docs, "ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["tls"] == "enable"
    assert "authenticationRef" not in trigger


def test_keda_scale_to_zero_only_when_allowed() -> None:
    docs = render({"autoscaling": {"keda": {"enabled": True, "minReplicaCount": 0,
                                            "allowScaleToZero": True}}})
    assert one(docs, "ScaledObject")["spec"]["minReplicaCount"] == 0


@pytest.mark.parametrize(("partitions", "expected"), [(4, 4), (None, 12)])
def test_hpa_caps_replicas_at_partition_count(partitions: int | None, expected: int) -> None:
    hpa = one(render({"autoscaling": {"hpa": {"enabled": True, "maxReplicas": 12,
                                              "partitions": partitions}}}),
              "HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, KUBE_VERSION, strict=True)
    assert hpa["spec"]["maxReplicas"] == expected


def test_pdb_lets_unready_idle_replicas_be_evicted(all_on_docs: list[Manifest]) -> None:
    # A replica without partitions is never ready; under the default policy it would count
    # as disrupted and block node drains.
    pdb = one(all_on_docs, "PodDisruptionBudget")
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_judge_key_from_extra_env_from_is_accepted() -> None:
    values = {
        "config": {"judges": {"llm": {"type": "openai", "base_url": "http://x", "model": "m",
                                      "api_key_env": "JUDGE_KEY"}}},
        "extraEnvFrom": [{"secretRef": {"name": "judge-keys"}}],
    }
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["envFrom"] == [{"secretRef": {"name": "judge-keys"}}]


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_all_interfaces_server_hosts_render(host: str) -> None:
    docs = render({"config": {"server": {"host": host}}})
    assert yaml.safe_load(_rendered_config(docs))["server"]["host"] == host


def _rule_exprs(rule: Manifest) -> list[str]:
    return [str(r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]]


def test_off_topic_rules_follow_the_configured_evaluator_name() -> None:
    rule = one(render({"prometheusRule": {"enabled": True, "topicEvaluator": "topic_llm"}}),
               "PrometheusRule")
    _validate_custom(rule)
    label_exprs = [e for e in _rule_exprs(rule) if "evalstream_labels_total" in e]
    assert len(label_exprs) >= 4
    for expr in label_exprs:
        assert 'evaluator="topic_llm"' in expr
        assert 'evaluator="topic"' not in expr


_TOPIC_ROUTES = [{"name": "r", "evaluators": [
    {"evaluator": "topic", "name": "topic_llm", "params": {"topics": {"billing": "Bills"}}}]}]


def test_off_topic_rules_watching_no_topic_evaluator_fail_to_render() -> None:
    # Before: rendered, and the off-topic rules watched evaluator="topic", which no result
    # carried: the alert could never fire.
    values: dict[str, Any] = {"prometheusRule": {"enabled": True},
                              "config": {"routes": _TOPIC_ROUTES}}
    with pytest.raises(helm.HelmError, match=r'topicEvaluator is "topic", but config.routes '
                                             r"name their topic evaluator\(s\) topic_llm"):
        render(values)
    # Pointed at it, or with routes the chart cannot see (from the environment), it renders.
    one(render({**values, "prometheusRule": {"enabled": True, "topicEvaluator": "topic_llm"}}),
        "PrometheusRule")
    render({**values, "extraEnv": [{"name": "EVALSTREAM_ROUTES", "value": "[]"}]})
    render({**values, "extraEnvFrom": [{"configMapRef": {"name": "more-env"}}]})
    # Without a topic evaluator in the routes the rules have no data, and mislead no one.
    one(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")


def test_service_monitor_job_matches_the_availability_alerts(
    all_on_docs: list[Manifest],
) -> None:
    """The operator names the job after the Service label jobLabel names, else after the
    Service; EvalstreamTargetDown's job selector must match what the chart produces."""
    rules = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text("utf-8"))
    target_down = next(r for g in rules["groups"] for r in g["rules"]
                       if r.get("alert") == "EvalstreamTargetDown")
    regex = re.search(r'up\{job=~"([^"]+)"\}', target_down["expr"])
    assert regex is not None
    monitor = one(all_on_docs, "ServiceMonitor")
    service = one(all_on_docs, "Service")
    job = service["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert job == "evalstream"
    # Prometheus anchors label regexes; the Service-name default must match as well.
    for name in (job, service["metadata"]["name"], "evalstream-prod"):
        assert re.fullmatch(regex.group(1), name), name
    assert not re.fullmatch(regex.group(1), "node-exporter")


def test_prometheus_rule_ships_the_rules_file(all_on_docs: list[Manifest]) -> None:
    shipped = yaml.safe_load((CHART / "files" / "prometheus-rules.yaml").read_text("utf-8"))
    rule = one(all_on_docs, "PrometheusRule")
    assert rule["spec"]["groups"] == shipped["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_dashboard_config_map_is_sidecar_discoverable(all_on_docs: list[Manifest]) -> None:
    cm = one(all_on_docs, "ConfigMap", "es-evalstream-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "files" / "dashboard.json").read_text("utf-8"))
    assert json.loads(cm["data"]["evalstream.json"]) == shipped


def test_service_monitor_scrapes_the_service_port(all_on_docs: list[Manifest]) -> None:
    monitor = one(all_on_docs, "ServiceMonitor")
    service = one(all_on_docs, "Service")
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"].items()


@pytest.mark.parametrize(("interval", "timeout", "renders"), [
    ("30s", "10s", True), ("30s", "30s", True), ("1m", "45s", True), ("1m30s", "1m", True),
    ("500ms", "250ms", True), ("", "10s", True), ("15s", "20s", False), ("1m", "1m30s", False),
    ("10s", "1m", False), ("250ms", "1s", False),
])
def test_scrape_timeout_longer_than_the_interval_fails_to_render(
    interval: str, timeout: str, renders: bool,
) -> None:
    # Prometheus refuses a scrape config whose timeout exceeds its interval; the operator
    # then drops the ServiceMonitor (or the reload fails) and nothing scrapes the workers.
    values = {"serviceMonitor": {"enabled": True, "interval": interval,
                                 "scrapeTimeout": timeout}}
    if renders:
        monitor = one(render(values), "ServiceMonitor")
        assert monitor["spec"]["endpoints"][0]["scrapeTimeout"] == timeout
    else:
        with pytest.raises(helm.HelmError, match=r"serviceMonitor\.scrapeTimeout"):
            render(values)


def test_optional_objects_are_off_by_default(default_docs: list[Manifest]) -> None:
    kinds = {d["kind"] for d in default_docs}
    assert kinds == {"ConfigMap", "Deployment", "Service", "ServiceAccount"}
