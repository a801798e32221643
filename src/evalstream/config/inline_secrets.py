"""Secrets written in the config file are refused, each with where it belongs.

A config file ends up in ConfigMaps, repositories and logs: credentials come from the
environment or from files only. Checked on the file's own data, before the environment is
merged, so the same fields set through ``EVALSTREAM_`` variables stay accepted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from evalstream.errors import ConfigError

__all__ = ["refuse_inline_secrets"]


#: aiokafka options that are credentials, refused in the file's ``kafka.extra``, with where
#: each belongs. Its other options are no secrets (``sasl_plain_username``, as
#: ``kafka.sasl_username``; the Kerberos service and domain names; ``transactional_id``),
#: and TLS is configured with file paths only (``ssl_context`` is the worker's own).
_EXTRA_SECRETS = {
    "sasl_plain_password": "set EVALSTREAM_KAFKA__SASL_PASSWORD or kafka.sasl_password_file "
                           "instead",
    # An object that fetches tokens: what a file can hold here is a token itself, which
    # aiokafka refuses only when the worker connects.
    "sasl_oauth_token_provider": "an aiokafka AbstractTokenProvider, given from Python "
                                 "(load_settings(kafka=...)), never a token in the file",
}


def refuse_inline_secrets(data: dict[str, Any], path: Path | str) -> None:
    """Secrets come from the environment or files only: a config file is not a secret store.

    Checked on the file's own data, before the environment is merged, so the same fields
    set through EVALSTREAM_ variables stay accepted.
    """
    found: list[str] = []
    kafka = data.get("kafka")
    if isinstance(kafka, dict):
        if kafka.get("sasl_password") is not None:
            found.append("kafka.sasl_password: set EVALSTREAM_KAFKA__SASL_PASSWORD or "
                         "kafka.sasl_password_file instead")
        if kafka.get("ssl_password") is not None:
            found.append("kafka.ssl_password: set EVALSTREAM_KAFKA__SSL_PASSWORD or "
                         "kafka.ssl_password_file instead")
        extra = kafka.get("extra")
        if isinstance(extra, dict):
            found.extend(f"kafka.extra.{name}: {where}" for name, where in _EXTRA_SECRETS.items()
                         if extra.get(name) is not None)
    judges = data.get("judges")
    if isinstance(judges, dict):
        for name, judge in judges.items():
            if isinstance(judge, dict):
                found.extend(_judge_secrets(str(name), judge))
    found.extend(_param_secrets(data.get("routes")))
    if found:
        raise ConfigError(f"secrets must not be written in the config file {path} (it ends up "
                          f"in ConfigMaps, repositories and logs):\n  " + "\n  ".join(found))


#: A header or query parameter name that says it holds a key: a secret word (key, token,
#: secret, password, auth, credentials) as a word of its own (at the start, after a
#: separator or a camelCase boundary, and not followed by a lower-case letter), or at the
#: end of the name (``authtoken``). Not inside another word, where masking's broader
#: ``_SECRET_NAME`` matches: every Portkey gateway header (``x-portkey-provider``: "portkey"
#: holds "key"), ``X-Bypass-Cache``, ``X-Author`` or ``max_tokens`` was refused.
_KEY_NAME = re.compile(
    r"(?:^|(?<=[^A-Za-z0-9])|(?<=[a-z])(?=[A-Z]))"
    r"(?i:api_?key|key|token|secret|pass(?:word|wd)?|auth(?:orization)?|cred(?:ential)?s?)"
    r"(?![a-z])"
    r"|(?i:key|token|secret|password|passwd)$")
#: A query parameter also holds a key under Azure's names: a SAS token's signature
#: (``sig``) and an Azure Functions key (``code``).
_QUERY_KEY_NAME = re.compile(f"{_KEY_NAME.pattern}|^(?i:sig|code)$")
#: A name's last words when its "key" identifies something rather than grants access: an
#: idempotency key (the ``Idempotency-Key`` header of an IETF draft: a retried request's
#: id) or a cache key (``cf-aig-cache-key``, Cloudflare AI Gateway's). They are cut off
#: before the check, so the rest of the name still counts (``X-Auth-Cache-Key``: "Auth").
_NOT_A_CREDENTIAL = re.compile(
    r"(?:^|(?<=[^A-Za-z0-9])|(?<=[a-z])(?=[A-Z]))(?i:idempotency|cache)[-_]?(?i:key)$")


def _names_a_key(name: str, pattern: re.Pattern[str]) -> bool:
    """Whether header or query parameter ``name`` says it holds a key (``pattern``)."""
    return pattern.search(_NOT_A_CREDENTIAL.sub("", name)) is not None


def _judge_secrets(name: str, judge: dict[str, Any]) -> list[str]:
    """What judge ``name``'s entry in the file holds that is a secret, each with where it
    belongs. A gateway key in ``headers`` or ``query`` (``X-Goog-Api-Key``, ``?key=``) and
    user info in ``base_url`` are as secret as ``api_key``; check-config masks them, but the
    file they are written in is still a ConfigMap or a repository."""
    env = f"EVALSTREAM_JUDGES__{name.upper()}__"
    found: list[str] = []
    if judge.get("api_key") is not None:
        found.append(f"judges.{name}.api_key: set judges.{name}.api_key_env (the name "
                     f"of an environment variable) or api_key_file instead")
    base_url = judge.get("base_url")
    if isinstance(base_url, str) and _has_userinfo(base_url):
        found.append(f"judges.{name}.base_url: holds user info (user@ or user:password@, "
                     f"and gateways may take the key as the user name); set {env}BASE_URL "
                     f"instead, or send the key with api_key_env and api_key_header")
    for field, names in (("headers", _KEY_NAME), ("query", _QUERY_KEY_NAME)):
        values = judge.get(field)
        if isinstance(values, dict):
            secret = sorted(str(k) for k in values if _names_a_key(str(k), names))
            if secret:
                # One key fits api_key_header; a query parameter has no such setting.
                header = ("api_key_env with api_key_header (one header), or "
                          if field == "headers" else "")
                found.append(f"judges.{name}.{field} {secret}: a key; set {header}"
                             f"{env}{field.upper()} as JSON (merged over the file's)")
    return found


#: A route evaluator param that holds a credential, by its name with case and separators
#: dropped. Narrower than ``_KEY_NAME``: param names are the plugin's own, and counts such
#: as ``max_token`` or ``token_limit``, or ``key_field``, are common there.
_SECRET_PARAM = re.compile(
    r"(?:^(?:key|token)|apikey|apitoken|accesstoken|authtoken|bearertoken|password|passwd"
    r"|secret|secretkey|privatekey|credentials?)$")


def _param_secrets(routes: object) -> list[str]:
    """Route evaluator ``params`` in the file whose names say they hold a credential. No
    shipped evaluator has such a param; a plugin's would be printed by check-config unless
    it types it ``SecretStr``, and the file is a ConfigMap or a repository all the same."""
    found: list[str] = []
    for ri, route in enumerate(routes if isinstance(routes, list) else ()):
        evaluators = route.get("evaluators") if isinstance(route, dict) else None
        for ei, spec in enumerate(evaluators if isinstance(evaluators, list) else ()):
            params = spec.get("params") if isinstance(spec, dict) else None
            if isinstance(params, dict):
                found.extend(
                    f"routes.{ri}.evaluators.{ei}.params.{k}: a secret; let the evaluator "
                    f"read it from an environment variable or a file (name that in params)"
                    for k in sorted(str(k) for k in params)
                    if _SECRET_PARAM.search(re.sub(r"[^a-z0-9]", "", k.lower())))
    return found


#: A URL's authority: what follows ``scheme://`` up to its path, query or fragment (as
#: httpx splits it). Matched as text, so a URL urlsplit cannot parse (``[::1`` unclosed)
#: is still checked; the judge's own validation then reports what is wrong with it.
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")


def _has_userinfo(url: str) -> bool:
    """Whether ``url`` carries user info, ``user:password@`` or a bare ``user@``: gateways
    that take the key as the user name (``https://KEY@host``) make either a secret."""
    match = _AUTHORITY.match(url)
    return match is not None and bool(match.group(1).rpartition("@")[0])
