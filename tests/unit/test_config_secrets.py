"""Secrets: masked in check-config output and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evalstream.cli import main
from evalstream.config import load_settings, masked_dump
from evalstream.errors import ConfigError

SECRETS = ["APIM-SECRET", "GOOG-SECRET", "QUERY-SECRET", "s3cret", "hunter3"]

GATEWAY = {"type": "openai", "model": "m",
           "base_url": "https://user:s3cret@gw.example.com/openai/deployments/x",
           "headers": {"Ocp-Apim-Subscription-Key": "APIM-SECRET",
                       "x-goog-api-key": "GOOG-SECRET"},
           "query": {"api-version": "2024-06-01", "key": "QUERY-SECRET"}}


def test_masked_dump_hides_headers_query_url_credentials_and_secret_extras() -> None:
    settings = load_settings(None, judges={"llm": GATEWAY},
                             kafka={"extra": {"sasl_plain_password": "hunter3",
                                              "request_timeout_ms": 9000}})
    dump = masked_dump(settings)
    text = repr(dump)
    for secret in SECRETS:
        assert secret not in text
    judge = dump["judges"]["llm"]
    assert judge["base_url"] == "https://**********@gw.example.com/openai/deployments/x"
    assert set(judge["headers"]) == {"Ocp-Apim-Subscription-Key", "x-goog-api-key"}
    assert set(judge["query"]) == {"api-version", "key"}
    assert dump["kafka"]["extra"] == {"sasl_plain_password": "**********",
                                      "request_timeout_ms": 9000}
    # The settings themselves keep the real values: only the dump is masked.
    assert settings.judges["llm"].headers["x-goog-api-key"] == "GOOG-SECRET"  # type: ignore[union-attr]


def test_url_without_credentials_is_printed_as_is() -> None:
    settings = load_settings(None, judges={"llm": {"type": "openai", "model": "m",
                                                   "base_url": "http://llama:8080/v1"}})
    assert masked_dump(settings)["judges"]["llm"]["base_url"] == "http://llama:8080/v1"


def test_check_config_output_holds_no_secret(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    # The secrets come from the environment, merged over the file's non-secret parts.
    in_file = {**GATEWAY, "base_url": "https://gw.example.com/openai/deployments/x",
               "headers": {"OpenAI-Organization": "org-1"}, "query": {"api-version": "1"}}
    path.write_text(yaml.safe_dump({"judges": {"llm": in_file}}), encoding="utf-8")
    for field in ("base_url", "headers", "query"):
        value = GATEWAY[field]
        monkeypatch.setenv(f"EVALSTREAM_JUDGES__LLM__{field.upper()}",
                           value if isinstance(value, str) else json.dumps(value))
    monkeypatch.setenv("EVALSTREAM_KAFKA__EXTRA", '{"sasl_plain_password": "hunter3"}')
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    for secret in SECRETS:
        assert secret not in captured.out + captured.err
    judge = yaml.safe_load(captured.out)["judges"]["llm"]
    assert judge["query"] == {"api-version": "**********", "key": "**********"}
    assert set(judge["headers"]) == {"OpenAI-Organization", "Ocp-Apim-Subscription-Key",
                                     "x-goog-api-key"}


def test_bad_base_url_error_does_not_echo_credentials() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, judges={"llm": {"type": "openai", "model": "m",
                                            "base_url": "ftp://user:s3cret@host/x"}})
    assert "s3cret" not in str(info.value)
    assert "ftp://**********@host/x" in str(info.value)


def test_a_query_in_base_url_is_masked_in_errors() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, judges={"llm": {"type": "openai", "model": "m",
                                            "base_url": "ftp://host/x?key=s3cret"}})
    assert "s3cret" not in str(info.value)
    assert "ftp://host/x?**********" in str(info.value)


@pytest.mark.parametrize("base_url", ["https://gw.example/v1?key=s3cret",
                                      "https://gw.example/v1/?api-version=1&key=s3cret",
                                      "https://gw.example/v1?"])
@pytest.mark.parametrize("source", ["file", "env"])
def test_a_query_in_base_url_is_refused_naming_the_query_setting(
        base_url: str, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """httpx joins the request path onto the query: requests went to .../v1 itself, and
    check-config printed a ``?key=`` in it unmasked. Refused from either source (it never
    worked), without echoing it. Checked: accepted without the fix."""
    path = tmp_path / "c.yaml"
    in_file = base_url if source == "file" else "https://gw.example/v1"
    path.write_text(yaml.safe_dump({"judges": {"g": {"type": "openai", "model": "m",
                                                     "base_url": in_file}}}), encoding="utf-8")
    if source == "env":
        monkeypatch.setenv("EVALSTREAM_JUDGES__G__BASE_URL", base_url)
    with pytest.raises(ConfigError, match=r"judges\.g: .*base_url has a query .* under `query`"
                       ) as info:
        load_settings(path)
    assert "s3cret" not in str(info.value)
    assert main(["check-config", str(path)]) == 2
    captured = capsys.readouterr()
    assert "s3cret" not in captured.out + captured.err


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"kafka": {"sasl_password": "hunter2"}}, "kafka.sasl_password: set EVALSTREAM_KAFKA__"),
        ({"kafka": {"ssl_password": "hunter2"}}, "kafka.ssl_password: set EVALSTREAM_KAFKA__"),
        # A plugin evaluator's param: check-config would print it unless typed SecretStr.
        ({"routes": [{"evaluators": [{"evaluator": "refusal"},
                                     {"evaluator": "mine", "params": {"apiKey": "hunter2",
                                                                      "max_tokens": 5}}]}]},
         "routes.0.evaluators.1.params.apiKey: a secret; let the evaluator read it"),
        ({"kafka": {"extra": {"sasl_plain_password": "hunter2"}}},
         "kafka.extra.sasl_plain_password"),
        # Whatever the mechanism: a token written in the file is one.
        ({"kafka": {"extra": {"sasl_oauth_token_provider": "hunter2"}}},
         "kafka.extra.sasl_oauth_token_provider: an aiokafka AbstractTokenProvider, given "
         "from Python"),
        ({"judges": {"g": {"type": "openai", "base_url": "http://x", "model": "m",
                           "api_key": "hunter2"}}}, "judges.g.api_key: set judges.g.api_key_env"),
        ({"judges": {"g": {"type": "openai", "base_url": "https://bob:hunter2@gw/v1",
                           "model": "m"}}},
         "judges.g.base_url: holds user info (user@ or user:password@, and gateways may take "
         "the key as the user name); set EVALSTREAM_JUDGES__G__BASE_URL"),
        # Some gateways take the key as the user name: a bare user@ is as secret.
        ({"judges": {"g": {"type": "openai", "base_url": "https://hunter2@gateway.example/v1",
                           "model": "m"}}},
         "judges.g.base_url: holds user info"),
        # One urlsplit cannot parse (an unclosed IPv6 bracket) is checked all the same.
        ({"judges": {"g": {"type": "openai", "base_url": "https://hunter2@[::1/v1",
                           "model": "m"}}},
         "judges.g.base_url: holds user info"),
        ({"judges": {"g": {"type": "openai", "base_url": "http://x", "model": "m",
                           "headers": {"X-Org": "o", "X-Goog-Api-Key": "hunter2"}}}},
         "judges.g.headers ['X-Goog-Api-Key']: a key; set api_key_env with api_key_header"),
        ({"judges": {"g": {"type": "openai", "base_url": "http://x", "model": "m",
                           "query": {"api-version": "1", "key": "hunter2"}}}},
         "judges.g.query ['key']: a key; set EVALSTREAM_JUDGES__G__QUERY as JSON"),
    ],
)
def test_inline_secrets_in_the_file_are_refused(
        section: dict[str, object], needle: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(section), encoding="utf-8")
    with pytest.raises(ConfigError, match="must not be written in the config file") as info:
        load_settings(path)
    assert needle in str(info.value)
    assert "hunter2" not in str(info.value)
    assert main(["check-config", str(path)]) == 2
    assert main(["run", "--config", str(path)]) == 2
    assert "hunter2" not in capsys.readouterr().err


def test_plugin_params_that_only_mention_keys_or_tokens_stay_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    names = ["max_token", "token_limit", "key_field", "monkey", "api_key_env", "secret_file",
             "cache_key", "tokens"]
    path.write_text(yaml.safe_dump({"routes": [{"name": "r", "evaluators": [
        {"evaluator": "mine", "params": dict.fromkeys(names, 1)}]}]}), encoding="utf-8")
    assert set(load_settings(path).routes[0].evaluators[0].params) == set(names)
    for name in ("api_key", "OPENAI_API_KEY", "clientSecret", "password", "token",
                 "access-token", "private_key", "credentials"):
        path.write_text(yaml.safe_dump({"routes": [{"name": "r", "evaluators": [
            {"evaluator": "mine", "params": {name: "hunter2"}}]}]}), encoding="utf-8")
        with pytest.raises(ConfigError, match=rf"params\.{name}: a secret"):
            load_settings(path)


def test_what_is_no_secret_stays_accepted_in_the_file(tmp_path: Path) -> None:
    """Headers such as OpenAI-Organization, an api-version, an ``@`` past the authority."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"judges": {"g": {
        "type": "openai", "base_url": "https://gw/v1/@team", "model": "m",
        "headers": {"OpenAI-Organization": "org-1", "anthropic-version": "1"},
        "query": {"api-version": "2024-06-01"}}}}), encoding="utf-8")
    judge = load_settings(path).judges["g"]
    assert judge.headers == {"OpenAI-Organization": "org-1",  # type: ignore[union-attr]
                             "anthropic-version": "1"}


def test_the_same_secrets_from_the_environment_are_accepted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("judges:\n  g: {type: openai, base_url: 'http://x', model: m}\n",
                    encoding="utf-8")
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", "pw-from-env")
    monkeypatch.setenv("EVALSTREAM_JUDGES__G__API_KEY", "key-from-env")
    settings = load_settings(path)
    assert settings.kafka.password() == "pw-from-env"
    key = settings.judges["g"].api_key  # type: ignore[union-attr]
    assert key is not None
    assert key.get_secret_value() == "key-from-env"


def test_a_user_name_in_base_url_comes_from_the_environment_and_is_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A gateway that takes the key as the URL's user name: the file has the URL without
    it, EVALSTREAM_JUDGES__G__BASE_URL the whole of it, and check-config masks the key."""
    path = tmp_path / "c.yaml"
    path.write_text("judges:\n  g: {type: openai, base_url: 'https://gateway.example/v1', "
                    "model: m}\n", encoding="utf-8")
    monkeypatch.setenv("EVALSTREAM_JUDGES__G__BASE_URL", "https://sk-abc123@gateway.example/v1")
    judge = load_settings(path).judges["g"]
    assert judge.base_url == "https://sk-abc123@gateway.example/v1"  # type: ignore[union-attr]
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert "sk-abc123" not in captured.out + captured.err
    printed = yaml.safe_load(captured.out)["judges"]["g"]["base_url"]
    assert printed == "https://**********@gateway.example/v1"


@pytest.mark.parametrize("header", [
    "x-portkey-provider", "x-portkey-config", "X-Bypass-Cache", "X-Author",
    "Helicone-Cache-Enabled"])
def test_a_header_that_only_contains_a_secret_word_is_accepted(
        header: str, tmp_path: Path) -> None:
    """A secret word inside another word is no key: Portkey's gateway headers (all named
    ``x-portkey-...``: "portkey" holds "key") were refused, "bypass" for its "pass",
    "author" for its "auth". Checked: each refused without the fix."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"judges": {"g": {
        "type": "openai", "base_url": "http://x/v1", "model": "m",
        "headers": {header: "v"}, "query": {"max_tokens": "5"}}}}), encoding="utf-8")
    judge = load_settings(path).judges["g"]
    assert judge.headers == {header: "v"}  # type: ignore[union-attr]


@pytest.mark.parametrize("name", [
    "Idempotency-Key", "X-Idempotency-Key", "idempotency_key", "IdempotencyKey",
    "Cache-Key", "X-Cache-Key", "cf-aig-cache-key", "cache_key"])
def test_a_key_that_identifies_a_request_or_cache_entry_is_accepted(
        name: str, tmp_path: Path) -> None:
    """An idempotency key and a cache key are ids, not credentials: refused for their
    "Key" before (checked: each refused without the fix), in headers and query alike."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"judges": {"g": {
        "type": "openai", "base_url": "http://x/v1", "model": "m",
        "headers": {name: "v"}, "query": {name: "v"}}}}), encoding="utf-8")
    judge = load_settings(path).judges["g"]
    assert judge.headers == {name: "v"}  # type: ignore[union-attr]
    assert judge.query == {name: "v"}  # type: ignore[union-attr]


@pytest.mark.parametrize("name", [
    "x-portkey-api-key", "x-portkey-virtual-key", "Helicone-Auth", "X-Auth-Token",
    "accessToken", "apiKey", "APIKEY", "authtoken", "client_secret", "Proxy-Authorization",
    "X-Amz-Security-Token", "db_password", "Private-Token", "X-Api-Key-Id",
    "X-Api-Key", "api-key", "X-Goog-Api-Key", "Ocp-Apim-Subscription-Key",
    "cf-aig-authorization",
    # Only the trailing idempotency or cache key is no credential: the rest still counts.
    "X-Auth-Cache-Key", "Cache-Key-Secret", "Nocache-Key", "Idempotency-Token"])
def test_a_header_or_query_named_as_a_key_is_refused(name: str, tmp_path: Path) -> None:
    for field in ("headers", "query"):
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump({"judges": {"g": {
            "type": "openai", "base_url": "http://x/v1", "model": "m",
            field: {name: "hunter2"}}}}), encoding="utf-8")
        with pytest.raises(ConfigError, match=f"judges.g.{field} "):
            load_settings(path)


@pytest.mark.parametrize("name", ["sig", "code", "SIG"])
def test_azure_key_names_are_refused_as_query_parameters_only(
        name: str, tmp_path: Path) -> None:
    """A SAS token's signature and an Azure Functions key travel as ``?sig=`` and
    ``?code=``; as header names they say nothing."""
    def judge(field: str) -> dict[str, object]:
        return {"judges": {"g": {"type": "openai", "base_url": "http://x/v1", "model": "m",
                                 field: {name: "hunter2"}}}}

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(judge("query")), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"judges.g.query .*EVALSTREAM_JUDGES__G__QUERY"):
        load_settings(path)
    path.write_text(yaml.safe_dump(judge("headers")), encoding="utf-8")
    assert load_settings(path).judges["g"].headers == {name: "hunter2"}  # type: ignore[union-attr]
