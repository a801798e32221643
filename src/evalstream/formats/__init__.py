"""Input formats, chosen per topic: ``flat_json``, ``otlp_proto``, ``otlp_json``.

Each format module exposes ``make_decoder(topic: InputTopic) -> Decoder``; they are imported
lazily so an unused format costs nothing at start-up.
"""

from __future__ import annotations

import importlib

from evalstream.config import InputTopic
from evalstream.formats.base import Decoded, Decoder

__all__ = ["FORMATS", "Decoded", "Decoder", "decoder_for"]

FORMATS: dict[str, str] = {
    "flat_json": "evalstream.formats.flat_json",
    "otlp_proto": "evalstream.formats.otlp_proto",
    "otlp_json": "evalstream.formats.otlp_json",
}


def decoder_for(topic: InputTopic) -> Decoder:
    """The decoder for ``topic``'s configured format."""
    module = importlib.import_module(FORMATS[topic.format])
    decoder: Decoder = module.make_decoder(topic)
    return decoder
