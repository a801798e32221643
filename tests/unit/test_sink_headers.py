"""Dead-letter headers: where the message came from and why, which the message cannot forge."""

from __future__ import annotations

from evalstream.events import RawRecord
from evalstream.sinks.headers import dead_letter_headers


def test_original_headers_travel_but_cannot_override_the_dead_letter_headers() -> None:
    record = RawRecord("in", 3, 41, b"x", headers=(
        ("traceparent", b"00-abc"), ("reason", b"forged"), ("source_offset", b"0"),
        ("truncated_size", b"1")))
    headers = dead_letter_headers(record, "invalid_json", "the value is not valid JSON")
    names = [name for name, _ in headers]
    assert names.count("reason") == names.count("source_offset") == 1
    assert "truncated_size" not in names
    assert dict(headers) == {
        "reason": b"invalid_json", "error": b"the value is not valid JSON",
        "source_topic": b"in", "source_partition": b"3", "source_offset": b"41",
        "traceparent": b"00-abc"}
