"""``extraEnv`` must not move a setting the chart itself renders from ``config``.

The chart reads ``config.server.port`` for the container port the probes, Service and
scrapes use, ``config.worker.shutdown_timeout_s`` for the grace period, and (with KEDA)
the Kafka connection and input topics for the ScaledObject's triggers. An ``EVALSTREAM_``
variable in ``extraEnv`` overrides the file inside the pod (names are case-insensitive,
and a whole section as JSON is deep-merged), so the pod and the chart's objects would
disagree: a moved port leaves every probe failing, the pod is restarted for ever.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.deploy.test_helm import one, render

_KEDA = {"autoscaling": {"keda": {"enabled": True}}}


def _env(name: str, value: str, **more: Any) -> dict[str, Any]:
    return {"extraEnv": [{"name": name, "value": value}], **more}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (_env("EVALSTREAM_SERVER__PORT", "9100"), "config.server.port"),
        (_env("evalstream_server__port", "9100"), "config.server.port"),
        (_env("EVALSTREAM_SERVER", '{"port": 9100}'), "config.server.port"),
        (_env("EVALSTREAM_SERVER__HOST", "127.0.0.1"), "config.server.host"),
        (_env("EVALSTREAM_WORKER__SHUTDOWN_TIMEOUT_S", "120"),
         "config.worker.shutdown_timeout_s"),
        (_env("EVALSTREAM_WORKER", '{"shutdown_timeout_s": 120}'),
         "config.worker.shutdown_timeout_s"),
        (_env("EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS", "prod:9092", **_KEDA),
         "config.kafka.bootstrap_servers"),
        (_env("EVALSTREAM_KAFKA__GROUP_ID", "other", **_KEDA), "config.kafka.group_id"),
        (_env("EVALSTREAM_INPUTS", '[{"topic": "t"}]', **_KEDA), "config.inputs"),
    ],
    ids=["port", "port-lower-case", "server-json", "host", "shutdown", "worker-json",
         "keda-bootstrap", "keda-group", "keda-inputs"],
)
def test_env_overriding_what_the_chart_renders_fails(values: dict[str, Any],
                                                     message: str) -> None:
    # Before: rendered; e.g. the port moved to 9100 while probes knocked on 9464.
    with pytest.raises(helm.HelmError, match=rf"extraEnv .*{message}"):
        render(values)


@pytest.mark.parametrize(
    "values",
    [
        _env("EVALSTREAM_LOGGING__LEVEL", "DEBUG"),
        _env("EVALSTREAM_WORKER", '{"max_in_flight": 64}'),
        _env("EVALSTREAM_WORKER__MAX_IN_FLIGHT", "64"),
        # Without KEDA the chart reads nothing of the Kafka connection.
        _env("EVALSTREAM_KAFKA__BOOTSTRAP_SERVERS", "prod:9092"),
        _env("EVALSTREAM_KAFKA__SASL_USERNAME", "svc", **_KEDA),
        # A whole section from a Secret: its content cannot be seen, so it is trusted.
        {"extraEnv": [{"name": "EVALSTREAM_SERVER",
                       "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
    ],
    ids=["logging", "worker-json-other-key", "worker-other-key", "bootstrap-without-keda",
         "keda-username", "section-from-secret"],
)
def test_other_env_overrides_render(values: dict[str, Any]) -> None:
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert values["extraEnv"][0] in container["env"]
