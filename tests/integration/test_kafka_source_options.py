"""An option aiokafka checks only once connected is a config error, against a real broker."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from evalstream.config import KafkaSettings
from evalstream.errors import ConfigError
from evalstream.sources.base import TP
from evalstream.sources.kafka import KafkaSource
from tests.support.broker import Broker
from tests.support.kafka import unique


class _Handler:
    async def on_assigned(self, tps: Sequence[TP]) -> None:
        """Nothing to do: the source never gets that far."""

    async def on_revoked(self, tps: Sequence[TP]) -> None:
        """Nothing to do: the source never gets that far."""


async def test_an_isolation_level_aiokafka_refuses_is_a_config_error(broker: Broker) -> None:
    # Was a ValueError out of consumer.start() (aiokafka builds its fetcher only once
    # connected): a traceback and exit 1 from `run`, after check-config said valid.
    settings = KafkaSettings(bootstrap_servers=broker.bootstrap, connect_timeout_s=10,
                             extra={"isolation_level": "bogus"})
    source = KafkaSource(settings, [unique("iso")])
    with pytest.raises(ConfigError, match=r"kafka\.extra .*consumer refuses it.*isolation"):
        await source.start(_Handler())
    await source.stop()
