"""Kafka connection settings (topics are in ``topics.py``)."""

from __future__ import annotations

import functools
import inspect
import ipaddress
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import AwareDatetime, Field, SecretStr, field_validator, model_validator

from evalstream.config.secret_files import read_secret_file
from evalstream.config.section import Section
from evalstream.errors import ConfigError

__all__ = [
    "REFUSED_OPTION",
    "Client",
    "KafkaSettings",
    "build_client",
    "refused_option",
]

#: Which aiokafka client options are built for.
Client = Literal["consumer", "producer"]

_T = TypeVar("_T")

#: The largest Kafka INT32, the type of these timeouts and sizes in the protocol and in
#: Kafka's own configs. A larger session or poll timeout passed validation and then failed
#: every poll ("Unexpected error during coordination": aiokafka cannot encode it).
_INT32 = 2**31 - 1

_DELIVERY = "set by the worker: results are acknowledged by every in-sync replica before "\
            "the offsets of their events are committed, and it commits only those"
_BYTES = "set by the worker, which reads and writes the raw bytes"
#: aiokafka options the worker sets itself, refused in ``extra`` with the reason: one would
#: silently override a setting (and its checks) or the delivery guarantee.
_OWNED = {
    **{name: f"use kafka.{name}" for name in (
        "bootstrap_servers", "client_id", "security_protocol", "sasl_mechanism", "group_id",
        "auto_offset_reset", "session_timeout_ms", "max_poll_interval_ms", "max_poll_records",
        "fetch_max_bytes", "max_partition_fetch_bytes", "max_request_size")},
    "ssl_context": "use kafka.ssl_cafile, ssl_certfile and ssl_keyfile",
    "linger_ms": "use kafka.producer_linger_ms",
    "max_batch_size": "use kafka.producer_batch_bytes",
    "compression_type": "use kafka.producer_compression",
    "enable_auto_commit": _DELIVERY,
    "acks": _DELIVERY,
    "partitioner": "set by the worker: the results of one trace_id go to one partition",
    "key_serializer": _BYTES, "value_serializer": _BYTES,
    "key_deserializer": _BYTES, "value_deserializer": _BYTES,
}

#: Mechanisms authenticated with sasl_username + a password.
_PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: How far in the future ``start_from`` may be: clocks of the writer of the config and of
#: the worker may differ a little; further is a mistake (the group would skip everything).
_CLOCK_SKEW = timedelta(minutes=1)


#: A host name as Kafka clients take it (letters, digits, '.', '-'; '_' in some DNS names).
_HOST = re.compile(r"[A-Za-z0-9._-]+")
_BOOTSTRAP_FORM = "expected host:port, comma separated, e.g. kafka-0:9092,kafka-1:9092"


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _bootstrap_entry_problem(entry: str) -> str | None:
    """What is wrong with one ``bootstrap_servers`` entry as aiokafka parses it, or None.

    aiokafka takes ``host``, ``host:port``, ``[ipv6]``, ``[ipv6]:port`` and a bare IPv6
    address. A port that is not a number (``kafka:x``, ``kafka:``) made it raise a
    ValueError traceback when the worker started; the rest (an empty entry, a URL, a
    space) were retried as unreachable brokers for ``connect_timeout_s``.
    """
    if not entry:
        return "an entry is empty"
    if "://" in entry:
        return f"{entry!r} is a URL: write host:port, without a scheme"
    if _is_ipv6(entry):
        return None
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return f"{entry!r}: an IPv6 address is written [address]:port"
        if not _is_ipv6(host):
            return f"{entry!r}: {host!r} is not an IPv6 address"
        has_port, port = bool(rest), rest[1:]
    else:
        host, colon, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
        has_port = bool(colon)
        if not _HOST.fullmatch(host):
            return f"{entry!r}: {host!r} is not a host name"
    if has_port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"{entry!r}: the port {port!r} is not a number from 1 to 65535"
    return None


@functools.cache
def _accepted(client: Client) -> frozenset[str]:
    """Keyword arguments the aiokafka client's constructor takes (read from its signature).

    Imported lazily: only configs with ``extra`` options pay for importing aiokafka here.
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    cls = AIOKafkaConsumer if client == "consumer" else AIOKafkaProducer
    return frozenset(
        name for name, p in inspect.signature(cls).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "loop")


def _is_token_provider(value: object) -> bool:
    """Whether ``value`` is an aiokafka OAUTHBEARER token provider (imported lazily, as in
    ``_accepted``: only OAUTHBEARER configs pay for it)."""
    from aiokafka.abc import AbstractTokenProvider

    return isinstance(value, AbstractTokenProvider)


class KafkaSettings(Section):
    """How to reach the cluster. Security options are passed through to aiokafka."""

    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "evalstream"
    group_id: str = "evalstream"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    #: Backfill: partitions with no committed offset in ``group_id`` start at their first
    #: record stamped at or after this time (ISO 8601 with a timezone, e.g.
    #: 2026-11-29T00:00:00Z) instead of ``auto_offset_reset``; at their end when there is
    #: none. Partitions with a committed offset resume from it, so a restart never rewinds.
    #: An absolute time only: a relative one ("-24h") would move with every restart.
    start_from: AwareDatetime | None = None
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    #: From EVALSTREAM_KAFKA__SASL_PASSWORD (or use ``sasl_password_file``); refused in the
    #: YAML file.
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    #: The passphrase of an encrypted ``ssl_keyfile``, from EVALSTREAM_KAFKA__SSL_PASSWORD
    #: (or use ``ssl_password_file``); refused in the YAML file.
    ssl_password: SecretStr | None = None
    ssl_password_file: Path | None = None
    #: How long an unreachable broker is waited for - at start-up, and by each publish -
    #: before the worker exits with 1 (a broker that comes up after the worker, or
    #: restarts, is normal in a cluster); 0 tries once.
    connect_timeout_s: float = Field(default=300.0, ge=0)
    session_timeout_ms: int = Field(default=30_000, ge=1_000, le=_INT32)
    #: How long the consumer may go without fetching before it leaves the group. Waiting
    #: for a free evaluation slot can take as long as the slowest evaluation, up to three
    #: judge calls in a row (role_violation: role, verdict, sections), each bounded by its
    #: judge's ``deadline_s``; so this must exceed 3 x every judge's deadline (checked at
    #: start-up).
    max_poll_interval_ms: int = Field(default=1_200_000, ge=10_000, le=_INT32)
    max_poll_records: int = Field(default=500, ge=1)
    fetch_max_bytes: int = Field(default=52_428_800, ge=1_024, le=_INT32)
    max_partition_fetch_bytes: int = Field(default=4_194_304, ge=1_024, le=_INT32)
    #: How many bytes of message values the worker reads ahead of intake, so the broker
    #: serves the next fetch while intake works through the last one (up to 66% more events/s
    #: at 1% sampling on one core, ``bench/throughput.py``). Memory: this much in values
    #: plus ~320 bytes of objects per record. 0 reads one batch at a time.
    prefetch_bytes: int = Field(default=16_777_216, ge=0, le=_INT32)
    max_request_size: int = Field(default=4_194_304, ge=1_024, le=_INT32)
    producer_linger_ms: int = Field(default=5, ge=0)
    #: Producer batch size per partition. Results are ~1 KB: aiokafka's 16 KB default fills
    #: after a dozen and every further send waits for a drain, which caps throughput.
    producer_batch_bytes: int = Field(default=1_048_576, ge=1_024)
    producer_compression: Literal["gzip", "snappy", "lz4", "zstd"] | None = None
    #: Any other aiokafka keyword argument. Each goes only to the client(s) whose
    #: constructor takes it (``isolation_level`` to the consumer, ``request_timeout_ms`` to
    #: both); a name neither takes is a config error, and so is one the worker sets itself
    #: (``_OWNED``).
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("bootstrap_servers")
    @classmethod
    def _bootstrap_servers(cls, servers: str) -> str:
        # Split and stripped as aiokafka does (``collect_hosts``).
        for entry in servers.strip().split(","):
            problem = _bootstrap_entry_problem(entry.strip())
            if problem is not None:
                raise ValueError(f"{problem} ({_BOOTSTRAP_FORM})")
        return servers

    @field_validator("start_from")
    @classmethod
    def _start_from_not_in_future(cls, when: datetime | None) -> datetime | None:
        # A time in the future starts every partition at its end: the backfill would
        # re-score nothing and look successful. Before 1970 the broker cannot be asked.
        if when is None:
            return None
        if when > datetime.now(UTC) + _CLOCK_SKEW:
            raise ValueError(f"{when.isoformat()} is in the future")
        if when < datetime(1970, 1, 1, tzinfo=UTC):
            raise ValueError(f"{when.isoformat()} is before 1970-01-01T00:00:00Z")
        return when

    @field_validator("sasl_password_file", "ssl_cafile", "ssl_certfile", "ssl_keyfile",
                     "ssl_password_file")
    @classmethod
    def _readable_file(cls, path: Path | None) -> Path | None:
        # Checked at load so that check-config and run fail alike (exit 2), before connecting.
        if path is not None:
            if not path.is_file():
                raise ValueError(f"{path} does not exist or is not a file")
            if not os.access(path, os.R_OK):
                raise ValueError(f"{path} is not readable")
        return path

    @field_validator("extra")
    @classmethod
    def _known_options(cls, extra: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(extra) - _accepted("consumer") - _accepted("producer"))
        if unknown:
            raise ValueError(f"not an option of AIOKafkaConsumer or AIOKafkaProducer: {unknown}")
        owned = sorted(set(extra) & set(_OWNED))
        if owned:
            raise ValueError("; ".join(f"{name}: {_OWNED[name]}" for name in owned))
        return extra

    @model_validator(mode="after")
    def _options_of_another_protocol(self) -> KafkaSettings:
        # Used only with their protocol, they were otherwise accepted and ignored: a
        # forgotten security_protocol (SASL_SSL) connected in plaintext without
        # authenticating, and failed only at the broker, as an unanswered connection.
        protocol = self.security_protocol
        if self.sasl_mechanism is not None and not protocol.startswith("SASL"):
            raise ValueError(f"sasl_mechanism {self.sasl_mechanism} is set but "
                             f"security_protocol is {protocol}: SASL is used only with "
                             f"SASL_PLAINTEXT or SASL_SSL")
        # Not ssl_password: like the SASL one, a platform may export it whatever the protocol.
        files = [name for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile",
                                   "ssl_password_file")
                 if getattr(self, name) is not None]
        if files and protocol not in ("SSL", "SASL_SSL"):
            raise ValueError(f"{', '.join(files)} set but security_protocol is {protocol}: "
                             f"TLS files are used only with SSL or SASL_SSL")
        return self

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if not self.security_protocol.startswith("SASL"):
            return self
        if self.sasl_mechanism is None:
            raise ValueError("sasl_mechanism is required when security_protocol is SASL_*")
        if self.sasl_mechanism in _PASSWORD_MECHANISMS:
            # aiokafka's own sasl_plain_* keywords, passed through ``extra`` (e.g. from
            # EVALSTREAM_KAFKA__EXTRA), are credentials too.
            if not self.sasl_username and not self.extra.get("sasl_plain_username"):
                raise ValueError(f"sasl_username is required for sasl_mechanism "
                                 f"{self.sasl_mechanism} (or EVALSTREAM_KAFKA__SASL_USERNAME)")
            if (self.sasl_password is None and self.sasl_password_file is None
                    and not self.extra.get("sasl_plain_password")):
                raise ValueError(f"sasl_mechanism {self.sasl_mechanism} needs a password: set "
                                 f"EVALSTREAM_KAFKA__SASL_PASSWORD or sasl_password_file")
        elif not _is_token_provider(provider := self.extra.get("sasl_oauth_token_provider")):
            # Anything else (a token as text, from EVALSTREAM_KAFKA__EXTRA) passed
            # check-config and crashed the worker with a ValueError when it connected.
            given = "" if provider is None else f", not a {type(provider).__name__}"
            raise ValueError(f"sasl_mechanism OAUTHBEARER needs extra.sasl_oauth_token_provider "
                             f"(an aiokafka AbstractTokenProvider, set from Python{given})")
        return self

    def check_clients(self) -> None:
        """Build both clients' options as the worker will, so their errors surface at load.

        Raises:
            ConfigError: a key, certificate or password file cannot be used.
        """
        self.client_options("consumer")
        self.client_options("producer")

    def client_options(self, client: Client | None = None) -> dict[str, Any]:
        """Connection and security keyword arguments for an aiokafka consumer or producer.

        ``extra`` is merged last so anything aiokafka accepts can be set from the config,
        restricted to the options ``client``'s constructor takes. Without ``client`` only
        the options both take are included (never a TypeError, but client-specific extras
        are left out), so callers should say which client they build.

        Raises:
            ConfigError: the SASL password file or a TLS file cannot be read or loaded.
        """
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.password()
        if self.security_protocol in ("SSL", "SASL_SSL"):
            options["ssl_context"] = self._ssl_context()
        if client is None:
            accepted = _accepted("consumer") & _accepted("producer") if self.extra else frozenset()
        else:
            accepted = _accepted(client) if self.extra else frozenset()
        options.update({k: v for k, v in self.extra.items() if k in accepted})
        return options

    def _ssl_context(self) -> Any:
        import ssl  # only TLS deployments need it

        try:
            context = ssl.create_default_context(
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"kafka.ssl_cafile: cannot load {self.ssl_cafile}: {exc}") from exc
        if self.ssl_certfile is not None:
            asked: list[bool] = []

            def passphrase() -> str:
                asked.append(True)
                return self._key_passphrase()

            try:
                # Always a callable: without one, OpenSSL prompts on the terminal for an
                # encrypted key's passphrase (check-config hung) or, with no terminal,
                # fails with "[Errno 22] Invalid argument", which names nothing.
                context.load_cert_chain(
                    str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None,
                    password=passphrase)
            except ConfigError:
                raise
            except (OSError, ssl.SSLError) as exc:
                # OpenSSL says only "PEM lib" for a wrong passphrase.
                hint = " (is the key's passphrase right?)" if asked else ""
                raise ConfigError(f"kafka.ssl_certfile/ssl_keyfile: cannot load "
                                  f"{self.ssl_certfile}: {exc}{hint}") from exc
        return context

    def _key_passphrase(self) -> str:
        """The encrypted client key's passphrase; called by OpenSSL only for such a key."""
        passphrase = _secret(self.ssl_password, self.ssl_password_file, "ssl_password_file")
        if passphrase is None:
            raise ConfigError("kafka.ssl_keyfile is encrypted: set "
                              "EVALSTREAM_KAFKA__SSL_PASSWORD or kafka.ssl_password_file to "
                              "its passphrase")
        return passphrase

    def password(self) -> str | None:
        """The SASL password, from the environment-provided value or the file.

        Raises:
            ConfigError: the password file cannot be read or is empty.
        """
        return _secret(self.sasl_password, self.sasl_password_file, "sasl_password_file")


def _secret(value: SecretStr | None, path: Path | None, field: str) -> str | None:
    """A secret from its environment-provided ``value``, else from the file at ``path``
    (``kafka.<field>``), else None.

    Raises:
        ConfigError: the file cannot be read or is empty.
    """
    if value is not None:
        # Stripped like the file's: a variable filled from a Kubernetes Secret made with
        # --from-file often ends with a newline, and the broker refuses it.
        return value.get_secret_value().strip()
    if path is not None:
        return read_secret_file(path, f"kafka.{field}")
    return None


#: What aiokafka raises for an option value it refuses, when building a client or (for a
#: few, e.g. ``isolation_level``) when starting one.
REFUSED_OPTION = (TypeError, ValueError)


def refused_option(client: Client, exc: Exception) -> ConfigError:
    """The config error for an option value the aiokafka ``client`` refused with ``exc``."""
    return ConfigError(f"kafka.extra (or another kafka option): the aiokafka {client} "
                       f"refuses it: {type(exc).__name__}: {exc}")


def build_client(factory: Callable[..., _T], options: dict[str, Any], client: Client) -> _T:
    """``factory(**options)``: an aiokafka client, built (not started).

    aiokafka checks some option values only here (the type of a timeout...); such a
    value, typically from ``kafka.extra``, would otherwise end start-up with a traceback
    after check-config said the configuration is valid.

    Raises:
        ConfigError: aiokafka refuses an option (its message names no value).
    """
    try:
        return factory(**options)
    except REFUSED_OPTION as exc:
        raise refused_option(client, exc) from exc
