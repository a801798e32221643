"""Kafka options: files and SASL credentials checked at load, `extra` routed per client."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider

from evalstream.config import KafkaSettings, load_settings
from evalstream.errors import ConfigError

SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512"}


def test_sasl_needs_username_and_password(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="sasl_username is required"):
        load_settings(None, kafka=SASL)
    with pytest.raises(ConfigError, match="needs a password"):
        load_settings(None, kafka={**SASL, "sasl_username": "u"})
    pw = tmp_path / "pw"
    pw.write_text("s3cret\n", encoding="utf-8")
    settings = load_settings(None, kafka={**SASL, "sasl_username": "u",
                                          "sasl_password_file": str(pw)})
    assert settings.kafka.password() == "s3cret"
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", "from-env\n")  # as from a Secret
    assert load_settings(None, kafka={**SASL, "sasl_username": "u"}).kafka.password() == "from-env"


def test_sasl_credentials_may_come_as_aiokafka_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    # aiokafka's own keywords through EVALSTREAM_KAFKA__EXTRA worked before the credential
    # check and must keep working.
    monkeypatch.setenv("EVALSTREAM_KAFKA__EXTRA",
                       '{"sasl_plain_username": "u", "sasl_plain_password": "p"}')
    settings = load_settings(None, kafka=SASL)
    assert settings.kafka.extra["sasl_plain_username"] == "u"


def test_oauthbearer_needs_a_token_provider() -> None:
    with pytest.raises(ConfigError, match="sasl_oauth_token_provider"):
        load_settings(None, kafka={**SASL, "sasl_mechanism": "OAUTHBEARER"})


class _Tokens(AbstractTokenProvider):
    async def token(self) -> str:
        return "t"


def test_oauthbearer_token_provider_must_be_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A token as text (it can come from EVALSTREAM_KAFKA__EXTRA) passed check-config and
    crashed the worker with aiokafka's ValueError when it connected; refused at load now,
    without echoing it. Checked: no ConfigError without the fix."""
    oauth = {**SASL, "sasl_mechanism": "OAUTHBEARER"}
    monkeypatch.setenv("EVALSTREAM_KAFKA__EXTRA", '{"sasl_oauth_token_provider": "eyJ-tok"}')
    with pytest.raises(ConfigError, match=r"AbstractTokenProvider, set from Python, not a str"
                       ) as info:
        load_settings(None, kafka=oauth)
    assert "eyJ-tok" not in str(info.value)
    monkeypatch.delenv("EVALSTREAM_KAFKA__EXTRA")
    provider = _Tokens()
    settings = load_settings(None, kafka={**oauth,
                                          "extra": {"sasl_oauth_token_provider": provider}})
    assert settings.kafka.client_options("consumer")["sasl_oauth_token_provider"] is provider


def test_empty_password_file_is_an_error(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: .* is empty"):
        load_settings(None, kafka={**SASL, "sasl_username": "u", "sasl_password_file": str(pw)})


def test_password_file_that_is_not_text_is_a_config_error(tmp_path: Path) -> None:
    # Permission bits do not stop root (tests may run as root), so "unreadable" here is
    # bytes that are not UTF-8: the same "cannot read" path as a permission error, reported
    # by load_settings rather than when the worker connects.
    pw = tmp_path / "pw"
    pw.write_bytes(b"\xff\xfe\x00s3cret\x80")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: cannot read .*not UTF-8"
                       ) as info:
        load_settings(None, kafka={**SASL, "sasl_username": "u", "sasl_password_file": str(pw)})
    assert "s3cret" not in str(info.value)  # the file's content is never echoed


@pytest.mark.parametrize("field", ["ssl_cafile", "ssl_certfile", "ssl_keyfile",
                                   "sasl_password_file"])
def test_missing_files_name_the_field(field: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"kafka\.{field}: .*does not exist"):
        load_settings(None, kafka={field: str(tmp_path / "absent")})


def test_unloadable_ca_file_is_a_config_error(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"kafka\.ssl_cafile: cannot load"):
        load_settings(None, kafka={"security_protocol": "SSL", "ssl_cafile": str(ca)})


def test_extra_goes_only_to_the_clients_that_take_it() -> None:
    kafka = KafkaSettings(extra={"isolation_level": "read_committed", "request_timeout_ms": 9000,
                                 "transactional_id": "t"})
    consumer = kafka.client_options("consumer")
    producer = kafka.client_options("producer")
    assert consumer["isolation_level"] == "read_committed"
    assert "transactional_id" not in consumer
    assert producer["transactional_id"] == "t"
    assert "isolation_level" not in producer
    assert consumer["request_timeout_ms"] == producer["request_timeout_ms"] == 9000
    # Without a client only the options both take: never a TypeError in either constructor.
    assert set(kafka.client_options()) & {"isolation_level", "transactional_id"} == set()
    assert kafka.client_options()["request_timeout_ms"] == 9000


async def test_consumer_only_extra_does_not_break_the_producer() -> None:
    kafka = KafkaSettings(client_id="evalstream-test",
                          extra={"isolation_level": "read_committed", "request_timeout_ms": 9000})
    # Constructing connects nothing; the TypeError this guards against came from here.
    producer = AIOKafkaProducer(**kafka.client_options("producer"))
    consumer = AIOKafkaConsumer("t", **kafka.client_options("consumer"))
    try:
        # Private attributes: aiokafka exposes no getters for what it was built with.
        assert producer.client._client_id == "evalstream-test"
        assert producer._request_timeout_ms == 9000  # the shared extra reached the producer
        assert consumer._client._client_id == "evalstream-test"
        assert consumer._client._request_timeout_ms == 9000
        assert consumer._isolation_level == "read_committed"
        assert consumer.subscription() == {"t"}
    finally:
        await producer.stop()
        await consumer.stop()


def test_unknown_extra_option_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"kafka\.extra: .*\['bogus_option'\]"):
        load_settings(None, kafka={"extra": {"bogus_option": 1}})


def test_the_kafka_source_passes_consumer_extras() -> None:
    from evalstream.sources.kafka import KafkaSource

    source = KafkaSource(KafkaSettings(extra={"isolation_level": "read_committed"}), ["t"])
    assert source._options()["isolation_level"] == "read_committed"


# --- TLS client certificates (throwaway self-signed ones from the openssl CLI) -----------


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A self-signed EC certificate for 127.0.0.1 and its key: (cert.pem, key.pem)."""
    # Not a skip: scripts/setup installs it, and a skipped test would stand in for coverage.
    assert shutil.which("openssl"), "the openssl CLI is needed (scripts/setup installs it)"
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "2",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=30)
    return cert, key


def tls(cert: Path, key: Path | None, cafile: Path | None = None) -> dict[str, str]:
    options = {"security_protocol": "SSL", "ssl_certfile": str(cert),
               "ssl_cafile": str(cafile or cert)}
    if key is not None:
        options["ssl_keyfile"] = str(key)
    return options


async def test_client_certificate_from_config_is_presented_in_a_tls_handshake(
        tmp_path: Path) -> None:
    # A local TLS server that requires a client certificate signed by "client" proves the
    # loaded context really carries the configured cert and key (and trusts ssl_cafile).
    server_cert, server_key = self_signed(tmp_path, "server")
    client_cert, client_key = self_signed(tmp_path, "client")
    settings = load_settings(None, kafka=tls(client_cert, client_key, cafile=server_cert))
    context = settings.kafka.client_options("consumer")["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert settings.kafka.client_options("producer")["ssl_context"] is not None

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(client_cert))
    server_ctx.load_cert_chain(str(server_cert), str(server_key))
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    seen: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not seen.done():
            seen.set_result(writer.get_extra_info("peercert"))
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"), 10)
        assert await asyncio.wait_for(reader.read(2), 10) == b"ok"
        writer.close()
        peer = await asyncio.wait_for(seen, 10)
    finally:
        server.close()
        await server.wait_closed()
    assert dict(rdn[0] for rdn in peer["subject"])["commonName"] == "client"


def test_cert_and_key_in_one_file_load_without_ssl_keyfile(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path, "both")
    combined = tmp_path / "both.pem"
    combined.write_bytes(cert.read_bytes() + key.read_bytes())
    settings = load_settings(None, kafka=tls(combined, None, cafile=cert))
    assert isinstance(settings.kafka.client_options()["ssl_context"], ssl.SSLContext)


@pytest.mark.parametrize("problem", ["wrong_key", "not_a_key"])
def test_unusable_client_key_is_a_config_error_at_load(tmp_path: Path, problem: str) -> None:
    cert, _ = self_signed(tmp_path, "client")
    if problem == "wrong_key":
        _, key = self_signed(tmp_path, "other")  # a valid key that does not match the cert
    else:
        key = tmp_path / "garbage.key"
        key.write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n",
                       encoding="utf-8")
    with pytest.raises(ConfigError, match=r"kafka\.ssl_certfile/ssl_keyfile: cannot load "):
        load_settings(None, kafka=tls(cert, key))


def encrypted_key(directory: Path, passphrase: str) -> tuple[Path, Path]:
    """A self-signed certificate and its key encrypted with ``passphrase``."""
    cert, key = self_signed(directory, "client")
    encrypted = directory / "client.enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(key), "-aes256", "-passout",
                    f"pass:{passphrase}", "-out", str(encrypted)],
                   check=True, capture_output=True, timeout=30)
    assert b"ENCRYPTED" in encrypted.read_bytes()
    return cert, encrypted


def test_an_encrypted_client_key_loads_with_its_passphrase(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = encrypted_key(tmp_path, "hunter2")
    passphrase = tmp_path / "passphrase"
    passphrase.write_text("hunter2\n", encoding="utf-8")  # as from a Secret
    settings = load_settings(None, kafka=tls(cert, key) | {"ssl_password_file": str(passphrase)})
    assert isinstance(settings.kafka.client_options()["ssl_context"], ssl.SSLContext)
    monkeypatch.setenv("EVALSTREAM_KAFKA__SSL_PASSWORD", "hunter2\n")
    settings = load_settings(None, kafka=tls(cert, key))
    assert isinstance(settings.kafka.client_options()["ssl_context"], ssl.SSLContext)


def test_an_encrypted_client_key_without_its_passphrase_says_so(tmp_path: Path) -> None:
    # Without a passphrase callback OpenSSL prompted on the terminal (check-config waited
    # for input) or, with none, failed with "[Errno 22] Invalid argument".
    cert, key = encrypted_key(tmp_path, "hunter2")
    code = ("from evalstream.config import load_settings\n"
            f"load_settings(None, kafka={tls(cert, key)!r})\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert "ConfigError: kafka.ssl_keyfile is encrypted: set EVALSTREAM_KAFKA__SSL_PASSWORD " \
           "or kafka.ssl_password_file" in proc.stderr, proc.stderr


def test_a_wrong_passphrase_is_named_as_the_likely_cause(tmp_path: Path) -> None:
    cert, key = encrypted_key(tmp_path, "hunter2")
    wrong = tmp_path / "wrong"
    wrong.write_text("hunter3", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"cannot load .*is the key's passphrase right\?"):
        load_settings(None, kafka=tls(cert, key) | {"ssl_password_file": str(wrong)})


@pytest.mark.parametrize(("option", "says"), [
    ("enable_auto_commit", "commits only those"),
    ("acks", "acknowledged by every in-sync replica"),
    ("value_deserializer", "raw bytes"),
    ("group_id", "use kafka.group_id"),
    ("linger_ms", "use kafka.producer_linger_ms"),
])
def test_extra_cannot_override_what_the_worker_sets(option: str, says: str) -> None:
    # Merged last, `extra: {enable_auto_commit: true}` turned on aiokafka's auto-commit
    # under the worker, and `acks: 0` made "acknowledged" mean nothing: both commit the
    # offsets of results that may never be durable.
    with pytest.raises(ConfigError, match=rf"kafka\.extra: .*{option}: .*{says}"):
        load_settings(None, kafka={"extra": {option: 1}})


BAD_BOOTSTRAP = {
    # aiokafka's int(port) raised a ValueError traceback when `run` started (exit 1).
    "a port that is not a number": ("kafka:x", "the port 'x' is not a number"),
    "a colon and no port": ("kafka:", "the port '' is not a number"),
    "an IPv6 colon and no port": ("[::1]:", "the port '' is not a number"),
    # These were retried as unreachable brokers for connect_timeout_s (5 minutes).
    "a port out of range": ("kafka:99999", "the port '99999' is not a number from 1 to 65535"),
    "empty": ("", "an entry is empty"),
    "an empty entry": ("kafka-0:9092,,kafka-1:9092", "an entry is empty"),
    "a listener URL": ("PLAINTEXT://kafka:9092", "is a URL: write host:port"),
    "spaces for commas": ("kafka-0:9092 kafka-1:9092", "'kafka-0:9092 kafka-1' is not a host"),
    "bad IPv6": ("[fe80::zz]:9092", "'fe80::zz' is not an IPv6 address"),
}

GOOD_BOOTSTRAP = ["kafka:9092", "kafka", "kafka-0.kafka.svc.cluster.local:9093",
                  "10.0.0.1:9092, 10.0.0.2:9092", "[::1]:9092", "[::1]", "::1", "my_kafka:1"]


@pytest.mark.parametrize("case", sorted(BAD_BOOTSTRAP))
def test_a_malformed_bootstrap_address_is_a_config_error(case: str) -> None:
    value, says = BAD_BOOTSTRAP[case]
    with pytest.raises(ConfigError) as info:
        load_settings(None, kafka={"bootstrap_servers": value})
    assert "kafka.bootstrap_servers: " in str(info.value)
    assert says in str(info.value)
    assert "expected host:port, comma separated" in str(info.value)


@pytest.mark.parametrize("value", GOOD_BOOTSTRAP)
def test_every_address_form_aiokafka_takes_loads(value: str) -> None:
    from aiokafka.conn import collect_hosts

    assert load_settings(None, kafka={"bootstrap_servers": value}).kafka.bootstrap_servers \
        == value
    assert collect_hosts(value)  # and aiokafka parses it


@pytest.mark.parametrize("value", ["kafka:x", "kafka:"])
def test_run_exits_2_on_a_malformed_bootstrap_address(value: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"kafka: {{bootstrap_servers: '{value}', connect_timeout_s: 0}}\n",
                    encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "evalstream", "run", "--config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "kafka.bootstrap_servers: " in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL"])
def test_a_sasl_mechanism_without_a_sasl_protocol_is_refused(protocol: str) -> None:
    # Was accepted and ignored: the worker connected without authenticating.
    with pytest.raises(ConfigError, match=rf"kafka: .*sasl_mechanism SCRAM-SHA-512 is set but "
                                          rf"security_protocol is {protocol}: SASL is used"):
        load_settings(None, kafka={"security_protocol": protocol, "sasl_mechanism":
                                   "SCRAM-SHA-512", "sasl_username": "u"})


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SASL_PLAINTEXT"])
def test_tls_files_without_a_tls_protocol_are_refused(protocol: str, tmp_path: Path) -> None:
    # Were accepted and ignored: the worker connected without TLS.
    ca = tmp_path / "ca.pem"
    ca.write_text("not read", encoding="utf-8")
    kafka = {"security_protocol": protocol, "ssl_cafile": str(ca)}
    if protocol.startswith("SASL"):
        kafka |= {"sasl_mechanism": "PLAIN", "sasl_username": "u", "sasl_password_file":
                  str(ca)}
    with pytest.raises(ConfigError, match=rf"kafka: .*ssl_cafile set but security_protocol is "
                                          rf"{protocol}: TLS files are used only with SSL"):
        load_settings(None, kafka=kafka)


def test_a_sasl_password_from_the_environment_alone_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A platform may export it whatever the protocol: only an explicit choice is refused.
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", "pw")
    assert load_settings(None).kafka.security_protocol == "PLAINTEXT"


# --- kafka.start_from (backfill) ---------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    # Unquoted, YAML itself reads a timestamp (timezone-aware when it has one).
    ("2026-11-29T00:00:00Z", datetime(2026, 11, 29, tzinfo=UTC)),
    ("'2026-11-29T01:00:00+01:00'", datetime(2026, 11, 29, tzinfo=UTC)),
    ("2026-11-29 00:00:00.5+00:00", datetime(2026, 11, 29, 0, 0, 0, 500_000, tzinfo=UTC)),
])
def test_start_from_takes_an_iso_time_with_a_timezone(text: str, expected: datetime,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"kafka:\n  start_from: {text}\n", encoding="utf-8")
    assert load_settings(path).kafka.start_from == expected


def test_start_from_defaults_to_none_and_comes_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(None).kafka.start_from is None
    monkeypatch.setenv("EVALSTREAM_KAFKA__START_FROM", "2026-11-29T00:00:00Z")
    assert load_settings(None).kafka.start_from == datetime(2026, 11, 29, tzinfo=UTC)


@pytest.mark.parametrize(("value", "message"), [
    ("2026-11-29T00:00:00", "kafka.start_from: Input should have timezone info"),
    ("-24h", "kafka.start_from: "),  # no relative form: it would move with every restart
    ("1969-12-31T23:59:59Z", "kafka.start_from: .* is before 1970"),
])
def test_start_from_refuses_a_naive_relative_or_pre_epoch_time(value: str,
                                                               message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, kafka={"start_from": value})


def test_start_from_may_be_a_little_ahead_but_not_in_the_future() -> None:
    # A minute of clock skew between whoever wrote the config and the worker is allowed.
    soon = datetime.now(UTC) + timedelta(seconds=30)
    assert load_settings(None, kafka={"start_from": soon}).kafka.start_from == soon
    later = datetime.now(UTC) + timedelta(minutes=5)
    with pytest.raises(ConfigError, match=r"kafka\.start_from: .* is in the future"):
        load_settings(None, kafka={"start_from": later.isoformat()})
