"""Values never put a credential in the ConfigMap.

The worker refuses a config file holding a secret (``kafka.sasl_password``,
``kafka.extra.sasl_plain_password``, a judge's ``api_key``, a key in its ``headers`` or
``query``, user info in its ``base_url``), but in a cluster that refusal comes at pod
start, after the chart has written the secret into a ConfigMap any reader of the
namespace's ConfigMaps can see. The chart refuses them at render instead. Its header and
query check is a subset of the worker's (never refusing what the worker accepts), which
the last tests pin against ``load_settings`` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from evalstream.config import load_settings
from evalstream.errors import ConfigError
from tests.deploy.test_helm import render


def _judge(**fields: Any) -> dict[str, Any]:
    judge = {"type": "openai", "base_url": "https://llm.example/v1", "model": "m", **fields}
    return {"config": {"judges": {"llm": judge}}}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"config": {"kafka": {"extra": {"sasl_plain_password": "hunter2"}}}},
         "kafka.extra.sasl_plain_password"),
        ({"config": {"kafka": {"extra": {"sasl_oauth_token_provider": "eyJ..."}}}},
         "kafka.extra.sasl_oauth_token_provider"),
        (_judge(headers={"api-key": "azure-key"}), "judges.llm.headers"),
        (_judge(headers={"X-Goog-Api-Key": "AIza"}), "judges.llm.headers"),
        (_judge(headers={"Authorization": "Bearer sk"}), "judges.llm.headers"),
        (_judge(query={"key": "AIza"}), "judges.llm.query"),
        (_judge(query={"sig": "sas-signature"}), "judges.llm.query"),
        (_judge(base_url="https://user:sk-live@llm.example/v1"), "judges.llm.base_url"),
    ],
    ids=["kafka-extra-password", "kafka-extra-token", "azure-api-key-header",
         "google-key-header", "authorization-header", "query-key", "query-sas-sig",
         "base-url-userinfo"],
)
def test_secrets_in_values_fail_to_render(values: dict[str, Any], message: str) -> None:
    # Before: rendered into the ConfigMap, then the pod exited 2 at start.
    with pytest.raises(helm.HelmError, match=message):
        render(values)


# Header and query names the chart must refuse (the worker does too) or accept (the worker
# does too): gateway and API-version settings are not keys.
_KEY_NAMES = ["api-key", "x-api-key", "X-Goog-Api-Key", "Authorization", "x-auth-token",
              "apikey", "api_key", "Proxy-Authorization", "x-secret", "password",
              "X-Credentials", "cf-aig-authorization", "mytoken"]
_PLAIN_NAMES = ["x-portkey-provider", "OpenAI-Organization", "api-version", "X-Bypass-Cache",
                "Idempotency-Key", "cf-aig-cache-key", "X-Author", "max_tokens",
                "anthropic-version", "X-Title", "HTTP-Referer"]


def _worker_refuses(tmp_path: Path, values: dict[str, Any]) -> bool:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(values["config"]), encoding="utf-8")
    try:
        load_settings(path)
    except ConfigError as exc:
        return "secrets must not be written" in str(exc)
    return False


@pytest.mark.parametrize("field", ["headers", "query"])
@pytest.mark.parametrize("name", _KEY_NAMES)
def test_key_names_are_refused_by_chart_and_worker(tmp_path: Path, field: str,
                                                   name: str) -> None:
    values = _judge(**{field: {name: "v"}})
    assert _worker_refuses(tmp_path, values)
    with pytest.raises(helm.HelmError, match=f"judges.llm.{field}"):
        render(values)


@pytest.mark.parametrize("field", ["headers", "query"])
@pytest.mark.parametrize("name", _PLAIN_NAMES)
def test_plain_names_are_accepted_by_chart_and_worker(tmp_path: Path, field: str,
                                                      name: str) -> None:
    values = _judge(**{field: {name: "v"}})
    assert not _worker_refuses(tmp_path, values)
    render(values)
