"""The decode stage of the worker: size limit, per-topic decoders, and intake counts.

``Intake.decode`` turns one record into events or raises ``DecodeError`` (a dead letter).
Counts are gathered per batch and added to the metrics once.

At low rates most messages are sampled out, so that path is kept short. For ``flat_json``
topics without a custom mapping, ``Intake.to_decode`` asks the decoder for the sampling
keys of a partition's records (``sampling_keys``: one typed msgspec pass per message that
also checks every known field's type) and hashes them: a plain message no route would
sample is counted as a ``sampling`` skip without building anything. Anything else
(malformed messages, which become dead letters, and messages that need normalising) takes
``decode``, which passes the pipeline's sampling test to the decoder so those are skipped
before a model is built.

With ``sampling.key: message_key`` the worker decides before decoding, from the Kafka key
(``key_limit`` / ``key_hash``): a message whose key hashes at or above the highest route
rate is counted as a ``sampling`` skip and never decoded, so its content is never examined
(a malformed one is a sampling skip, not a dead letter). A message below it is decoded with
``decode(record, presampled=True)``: fully validated, without the decoder's own sampling
shortcut, and its events are planned with the key's fraction. Keyless (or empty-keyed)
messages take the ordinary path and are sampled on their events' ``trace_id``.

Neither shortcut skips a possible canary (``app/calibration.py``), which is evaluated
whatever the sampling: the probe and the decoder's shortcut let through an event whose
attributes hold ``evalstream.canary``, and the message-key test a keyed message with a
Kafka header of that name (``message_path``; keyless messages are decoded anyway); the
pipeline then decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from evalstream.app.pipeline import Pipeline
from evalstream.app.reach import attributes_read
from evalstream.config import Settings
from evalstream.errors import DecodeError
from evalstream.events import Record
from evalstream.formats import Decoded, Decoder, decoder_for
from evalstream.formats.flat_json import SAMPLED_OUT, FlatJsonDecoder
from evalstream.metrics import Metrics
from evalstream.sampling import SCALE
from evalstream.sources.base import TP

__all__ = ["SAMPLED_OUT", "BatchCounts", "Intake"]


class BatchCounts:
    """Intake counts of one batch, added to the metrics in one go by :meth:`Intake.flush`."""

    __slots__ = ("decoded", "sampled_out", "skipped")

    def __init__(self) -> None:
        self.decoded: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.sampled_out = 0

    def clear(self) -> None:
        """Start again from zero (the counts so far were added to the metrics)."""
        self.decoded.clear()
        self.skipped.clear()
        self.sampled_out = 0


class Intake:
    """Decodes records of the configured input topics.

    Args:
        settings: Input topics and ``worker.max_message_bytes``.
        pipeline: Provides the sampling test used by the flat_json shortcut.
        metrics: Consumed / decoded / skipped counters.

    Raises:
        ConfigError: a topic's decoder rejects its configuration (e.g. a bad mapping).
    """

    def __init__(self, settings: Settings, pipeline: Pipeline, metrics: Metrics) -> None:
        # Decoders carry the attributes routes, results and evaluators read (app/reach.py).
        read = attributes_read(settings, [e.params for e in pipeline.evaluators])
        self._decoders: dict[str, Decoder] = {t.topic: decoder_for(t, read[t.topic])
                                              for t in settings.inputs}
        self._max_bytes = settings.worker.max_message_bytes
        self._key = pipeline.sampling_key
        self._may_sample = pipeline.may_sample
        self._metrics = metrics
        self._consumed = {t.topic: metrics.messages_consumed.labels(t.topic)
                          for t in settings.inputs}
        self._decoded = {t.topic: metrics.events_decoded.labels(t.format)
                         for t in settings.inputs}
        self._skip_sampling = metrics.events_skipped.labels("sampling")
        sampler = pipeline.sampler
        # The pipeline's test ``fraction < max_rate`` on the hash scale: a key is kept when
        # ``key_hash(key) < limit``. Exact (both sides scale by a power of two), so these
        # shortcuts and the pipeline always agree.
        limit = pipeline.max_rate * SCALE
        #: With ``sampling.key: message_key``: the limit for the Kafka key's hash
        #: (``key_hash``). None when sampling is on the event.
        self.key_limit: float | None = limit if sampler.by_message_key else None
        #: The sampler's hash of key bytes (``zlib.crc32`` without a salt).
        self.key_hash = sampler.key_hash
        #: ``to_decode`` when a probe can decide for some topic (event-key sampling below
        #: rate 1); None otherwise, so callers skip the call altogether.
        self.to_decode: Callable[[str, Sequence[Record]], Sequence[Record]] | None = None
        keys = {topic: found for topic, d in self._decoders.items()
                if type(d) is FlatJsonDecoder
                and (found := d.sampling_keys(pipeline.sampling_key,
                                              self._max_bytes)) is not None}
        if keys and not sampler.by_message_key and pipeline.max_rate < 1.0:
            self.to_decode = self._prober(keys, limit, sampler.key_hash)

    @staticmethod
    def _prober(keys: dict[str, Callable[[Sequence[Record]], list[str | None]]],
                limit: float, key_hash: Callable[[bytes], int],
                ) -> Callable[[str, Sequence[Record]], Sequence[Record]]:

        def to_decode(topic: str, records: Sequence[Record]) -> Sequence[Record]:
            """The records of ``topic`` left to decode: all but the valid events that no
            route samples (skip those), in order."""
            sampling_keys = keys.get(topic)
            if sampling_keys is None:
                return records
            # One pass over the group for the keys, one here for the hashes: no Python call
            # per record but the hash (salted, a closure; unsalted, zlib.crc32).
            return [r for r, key in zip(records, sampling_keys(records), strict=True)
                    if key is None or key_hash(key.encode()) < limit]

        return to_decode

    def consumed(self, batch: Mapping[TP, Sequence[Record]]) -> None:
        """Count a fetched batch."""
        for (topic, _), records in batch.items():
            self._consumed[topic].inc(len(records))

    def decode(self, record: Record, *, presampled: bool = False) -> Decoded:
        """Decode one record (``SAMPLED_OUT`` when sampling leaves its event out).

        Args:
            record: The message.
            presampled: Sampling was already decided on the message key: decode fully,
                with no sampling shortcut.

        Raises:
            DecodeError: the record must be dead-lettered (``too_large``, a decoder's own
                reasons, or ``decoder_error`` when a decoder fails unexpectedly).
        """
        value = record.value
        if value is not None and len(value) > self._max_bytes:
            raise DecodeError("too_large", f"value of {len(value)} bytes exceeds "
                                           f"worker.max_message_bytes={self._max_bytes}")
        decoder = self._decoders[record.topic]
        try:
            if type(decoder) is FlatJsonDecoder and not presampled:
                return decoder.decode(record, key=self._key, keep=self._may_sample)
            return decoder(record)
        except DecodeError:
            raise
        except Exception as exc:  # a decoder bug must not stop the worker
            raise DecodeError("decoder_error", type(exc).__name__) from exc

    def flush(self, counts: BatchCounts) -> None:
        """Add a batch's counts to the metrics."""
        for topic, n in counts.decoded.items():
            self._decoded[topic].inc(n)
        if counts.sampled_out:
            self._skip_sampling.inc(counts.sampled_out)
        for reason, n in counts.skipped.items():
            self._metrics.events_skipped.labels(reason).inc(n)
