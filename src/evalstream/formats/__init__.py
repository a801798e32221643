"""Input formats, chosen per topic: ``flat_json``, ``otlp_proto``, ``otlp_json`` (spans), and
``otlp_logs_proto``, ``otlp_logs_json`` (GenAI events sent to the OTLP logs signal).

Each format module exposes ``make_decoder(topic: InputTopic, carry) -> Decoder``; they are
imported lazily so an unused format costs nothing at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from evalstream.config import InputTopic
from evalstream.formats.base import Decoded, Decoder

__all__ = ["FORMATS", "NEVER_SET", "Decoded", "Decoder", "decoder_for"]

FORMATS: dict[str, str] = {
    "flat_json": "evalstream.formats.flat_json",
    "otlp_proto": "evalstream.formats.otlp_proto",
    "otlp_json": "evalstream.formats.otlp_json",
    "otlp_logs_proto": "evalstream.formats.otlp_logs_proto",
    "otlp_logs_json": "evalstream.formats.otlp_logs_json",
}

#: ``TraceEvent`` fields a format's events never have, whatever the message holds: OTLP
#: spans and log events carry no expected answer. (A flat_json message may hold any field.) Start-up
#: checks refuse a route that needs one of them from inputs of such formats only.
NEVER_SET: dict[str, frozenset[str]] = {
    "flat_json": frozenset(),
    "otlp_proto": frozenset({"reference"}),
    "otlp_json": frozenset({"reference"}),
    "otlp_logs_proto": frozenset({"reference"}),
    "otlp_logs_json": frozenset({"reference"}),
}


def decoder_for(topic: InputTopic, carry: Iterable[str] = ()) -> Decoder:
    """The decoder for ``topic``'s configured format.

    Args:
        topic: The input.
        carry: Event attribute names the configuration reads; an OTLP decoder carries each
            one it does not set itself from the span or resource attribute of that key.
    """
    module = importlib.import_module(FORMATS[topic.format])
    decoder: Decoder = module.make_decoder(topic, tuple(carry))
    return decoder
