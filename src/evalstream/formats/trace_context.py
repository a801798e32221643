"""The ``context`` of a chat event: retrieved documents, bounded per event, and the
documents of a trace's retrieval spans that chat spans of the same trace inherit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

__all__ = ["MAX_CONTEXT_CHARS", "MAX_CONTEXT_DOCUMENTS", "TraceDocuments", "bounded_context"]

#: Bounds on one event's ``context``. The evaluators that read it (RAG groundedness and
#: relevancy, custom prompts) send at most ``max_chars`` (<= 200,000) of it, split between
#: the documents, so more is never read. Without a bound, context inherited from a trace's
#: retrieval spans is a documents x chat spans product: one retriever span with 10,000 tiny
#: documents and 1,000 small chat spans (a 300 KB message) made 10 million references.
MAX_CONTEXT_DOCUMENTS = 32
MAX_CONTEXT_CHARS = 200_000


def bounded_context(docs: Iterable[str]) -> tuple[str, ...]:
    """The first documents within :data:`MAX_CONTEXT_DOCUMENTS` / :data:`MAX_CONTEXT_CHARS`
    (the one that crosses the character bound is cut to it). Stops reading at the bound."""
    kept: list[str] = []
    room = MAX_CONTEXT_CHARS
    for doc in docs:
        if len(kept) == MAX_CONTEXT_DOCUMENTS or room <= 0:
            break
        if len(doc) > room:
            doc = doc[:room]
        kept.append(doc)
        room -= len(doc)
    return tuple(kept)


def _end(entry: tuple[int, str]) -> int:
    return entry[0]


class TraceDocuments:
    """The retrieval documents of one trace, handed to its chat spans as context.

    Documents are put in end-time order once (stable: message order for spans that ended
    together, rank order within a span), so the documents that ended before a chat span
    are a prefix, found by bisection, and its context is the bounded head of that prefix.
    Equal prefixes share one tuple. (Pydantic rebuilds a ``tuple[str, ...]`` field when it
    validates a TraceEvent, so each event still holds its own tuple, but of at most
    :data:`MAX_CONTEXT_DOCUMENTS` references to the same strings.)
    """

    __slots__ = ("_bounded", "_ends", "_prefixes")

    def __init__(self, docs: list[tuple[int, str]]) -> None:
        docs.sort(key=_end)
        self._ends = [end for end, _ in docs]
        self._bounded = bounded_context(doc for _, doc in docs)
        self._prefixes: dict[int, tuple[str, ...]] = {}

    def before(self, end_ns: int) -> tuple[str, ...]:
        """The bounded context of a chat span that ended at ``end_ns``."""
        count = bisect_right(self._ends, end_ns)
        bounded = self._bounded
        if count >= len(bounded):
            return bounded
        # Shorter than the bound: all ``count`` documents, none of them cut.
        found = self._prefixes.get(count)
        if found is None:
            found = self._prefixes[count] = bounded[:count]
        return found
