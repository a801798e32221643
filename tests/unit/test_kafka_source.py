"""KafkaSource.poll: transient consumer errors are waited out, permanent ones stop the worker."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    InvalidSessionTimeoutError,
    NodeNotReadyError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)

from evalstream.config import KafkaSettings
from evalstream.errors import SourceError
from evalstream.sources import kafka as source_module
from evalstream.sources.kafka import KafkaSource


class _Raising:
    """Stands in for the aiokafka consumer: getmany raises what it is given."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def getmany(self, **_: Any) -> Any:
        raise self.exc


def _source(exc: Exception) -> KafkaSource:
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = _Raising(exc)  # type: ignore[assignment]
    return source


@pytest.mark.parametrize("exc", [TopicAuthorizationFailedError(),
                                 GroupAuthorizationFailedError(),
                                 InvalidSessionTimeoutError()])
async def test_permanent_consumer_errors_stop_with_the_reason(exc: Exception) -> None:
    # aiokafka retries what can heal; these never will, so logging them for ever (while
    # /readyz says ready) helps no one.
    with pytest.raises(SourceError, match=type(exc).__name__):
        await _source(exc).poll(0.1, 10)


@pytest.mark.parametrize("exc", [NodeNotReadyError(), RecordTooLargeError()])
async def test_transient_consumer_errors_are_waited_out(
        exc: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_module, "_BACKOFF_S", 0.0)
    assert await _source(exc).poll(0.1, 10) == {}


class _Rebalancing:
    """A consumer whose second partition is taken away while position() awaits."""

    def __init__(self) -> None:
        self.assigned = {TopicPartition("traces", 0), TopicPartition("traces", 1)}

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set()

    def highwater(self, tp: TopicPartition) -> int:
        assert tp in self.assigned  # as aiokafka does
        return 100

    async def position(self, tp: TopicPartition) -> int:
        self.assigned.discard(TopicPartition("traces", 1 - tp.partition))
        return 40


async def test_lag_skips_a_partition_revoked_while_it_was_being_read() -> None:
    source = KafkaSource(KafkaSettings(), ["traces"])
    source._consumer = _Rebalancing()  # type: ignore[assignment]
    lag = await source.lag()
    assert len(lag) == 1
    assert list(lag.values()) == [60]
