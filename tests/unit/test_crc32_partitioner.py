"""The results producer's partitioner: one key, one partition, every partition reachable."""

from __future__ import annotations

from evalstream.sinks.kafka import crc32_partitioner


def test_same_key_same_partition() -> None:
    parts = [0, 1, 2, 3]
    key = b"trace-123"
    first = crc32_partitioner(key, parts, parts)
    assert all(crc32_partitioner(key, parts, parts[:1]) == first for _ in range(5))


def test_keys_spread_over_every_partition() -> None:
    parts = [0, 1, 2, 3]
    seen = {crc32_partitioner(f"t{i}".encode(), parts, parts) for i in range(200)}
    assert seen == set(parts)


def test_keyless_records_go_to_an_available_partition() -> None:
    assert {crc32_partitioner(None, [0, 1, 2], [2]) for _ in range(20)} == {2}
    assert crc32_partitioner(None, [5], []) == 5
