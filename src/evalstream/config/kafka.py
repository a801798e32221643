"""Kafka connection and topic settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

__all__ = ["InputTopic", "KafkaSettings", "TopicSettings"]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSettings(_Section):
    """How to reach the cluster. Security options are passed through to aiokafka."""

    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "evalstream"
    group_id: str = "evalstream"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"] | None = None
    sasl_username: str | None = None
    #: Prefer EVALSTREAM_KAFKA__SASL_PASSWORD or ``sasl_password_file``; never in the YAML.
    sasl_password: SecretStr | None = None
    sasl_password_file: Path | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    session_timeout_ms: int = Field(default=30_000, ge=1_000)
    max_poll_records: int = Field(default=500, ge=1)
    fetch_max_bytes: int = Field(default=52_428_800, ge=1_024)
    max_partition_fetch_bytes: int = Field(default=4_194_304, ge=1_024)
    max_request_size: int = Field(default=4_194_304, ge=1_024)
    producer_linger_ms: int = Field(default=5, ge=0)
    #: Producer batch size per partition. Results are ~1 KB: aiokafka's 16 KB default fills
    #: after a dozen and every further send waits for a drain, which caps throughput.
    producer_batch_bytes: int = Field(default=1_048_576, ge=1_024)
    producer_compression: Literal["gzip", "snappy", "lz4", "zstd"] | None = None
    #: Extra keyword arguments for both AIOKafkaConsumer and AIOKafkaProducer.
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sasl_needs_credentials(self) -> KafkaSettings:
        if self.security_protocol.startswith("SASL") and self.sasl_mechanism is None:
            raise ValueError("sasl_mechanism is required when security_protocol is SASL_*")
        return self

    def client_options(self) -> dict[str, Any]:
        """Connection and security keyword arguments shared by aiokafka consumers/producers.

        ``extra`` is merged last so anything aiokafka accepts can be set from the config.
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
            import ssl  # only TLS deployments need it

            context = ssl.create_default_context(
                cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
            if self.ssl_certfile is not None:
                context.load_cert_chain(
                    str(self.ssl_certfile), str(self.ssl_keyfile) if self.ssl_keyfile else None)
            options["ssl_context"] = context
        options.update(self.extra)
        return options

    def password(self) -> str | None:
        """The SASL password, from the environment-provided value or the file."""
        if self.sasl_password is not None:
            return self.sasl_password.get_secret_value()
        if self.sasl_password_file is not None:
            return self.sasl_password_file.read_text(encoding="utf-8").strip()
        return None


class InputTopic(_Section):
    """One topic to consume and how its messages are encoded."""

    topic: str = Field(min_length=1)
    format: Literal["flat_json", "otlp_proto", "otlp_json"] = "flat_json"
    #: flat_json only: TraceEvent field -> dotted path in the message (e.g. output: response.text).
    mapping: dict[str, str] = Field(default_factory=dict)
    #: otlp_*: span attribute holding the session id, tried before the standard keys.
    session_attribute: str | None = None
    #: otlp_*: resource or span attribute naming the app, tried before ``service.name``.
    app_attribute: str | None = None
    #: otlp_*: span kinds evaluated, matched (lowercased) against ``gen_ai.operation.name``,
    #: ``openinference.span.kind`` or ``llm.request.type``; other GenAI spans (tools,
    #: retrieval, agents, embeddings...) are skipped as ``not_llm``.
    llm_operations: list[str] = Field(
        default_factory=lambda: ["chat", "text_completion", "generate_content", "completion",
                                 "llm"])
    #: otlp_*: extra ``TraceEvent.attributes`` name -> span or resource attribute key.
    attribute_map: dict[str, str] = Field(default_factory=dict)


class TopicSettings(_Section):
    """Where the worker writes."""

    results: str = Field(default="evalstream.results", min_length=1)
    dead_letter: str = Field(default="evalstream.dlq", min_length=1)
    alerts: str = Field(default="evalstream.alerts", min_length=1)
