"""One message's sampling key, through a decoder's probe of a partition's records."""

from __future__ import annotations

import sys
from collections.abc import Callable

from evalstream.events import RawRecord
from evalstream.formats.flat_json import FlatJsonDecoder


def sampling_probe(decoder: FlatJsonDecoder, key: str) -> Callable[[bytes], str | None] | None:
    """``decoder.sampling_keys`` for one message value, with no size limit (None when the
    topic has a custom mapping)."""
    keys = decoder.sampling_keys(key, sys.maxsize)
    if keys is None:
        return None

    def probe(value: bytes) -> str | None:
        return keys((RawRecord("traces", 0, 0, value),))[0]

    return probe
