"""Kafka options: files and SASL credentials checked at load, `extra` routed per client."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

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
    monkeypatch.setenv("EVALSTREAM_KAFKA__SASL_PASSWORD", "from-env")
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


def test_empty_password_file_is_an_error(tmp_path: Path) -> None:
    pw = tmp_path / "pw"
    pw.write_text("\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_file: .* is empty"):
        load_settings(None, kafka={**SASL, "sasl_username": "u", "sasl_password_file": str(pw)})


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
