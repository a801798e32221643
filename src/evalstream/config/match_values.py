"""What a route's ``match`` accepts for one field: exact values and prefixes.

A value ending in ``*`` is a prefix: ``gpt-4o-mini*`` accepts ``gpt-4o-mini`` and
``gpt-4o-mini-2024-07-18`` (the response model OpenInference reports where users write the
request model), ``checkout-*`` accepts ``checkout-eu``. A bare ``*`` is the empty prefix:
any value, so the field must be present. Every other value is matched exactly.

Nothing else is a pattern, and what looks like glob syntax is refused rather than matched
literally: ``*`` before the end (``gpt-*-mini``), ``?`` and ``[``. Read as literal text they
would match no real value, and the route would load and never get an event, the silent
filter start-up exists to refuse; no model, service, topic or tenant name we know of needs
them. Prefixes keep the hot path a set lookup plus, only when a field lists any,
one ``str.startswith`` over a tuple: no regular expression per event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Accepted", "value_error"]


def value_error(value: str) -> str | None:
    """Why ``value`` cannot be a match value, or None when it can.

    The reason is worded for a config error that names the field before it.
    """
    if "*" in value[:-1]:
        return (f"{value!r}: \"*\" is allowed only at the end, as a prefix (\"checkout-*\" "
                f"accepts \"checkout-eu\"); values are matched exactly or by prefix, not as "
                f"globs")
    bad = [c for c in "?[" if c in value]
    if bad:
        return (f"{value!r}: {' and '.join(repr(c) for c in bad)} is glob syntax, and match "
                f"values are not globs (only a trailing \"*\" is special, as a prefix): "
                f"write the exact value, or a prefix such as \"gpt-4o-mini*\"")
    return None


@dataclass(frozen=True, slots=True)
class Accepted:
    """The values one field of a match accepts, in its smallest form.

    ``exact`` holds the values no prefix already accepts, ``prefixes`` the prefixes no
    shorter one already accepts (``("",)`` alone when ``*`` was given: any value).
    """

    exact: frozenset[str]
    prefixes: tuple[str, ...]

    @classmethod
    def parse(cls, values: str | Iterable[str]) -> Accepted:
        """From the configured value(s), already checked with :func:`value_error`."""
        given = [values] if isinstance(values, str) else list(values)
        # Shortest first: a prefix is kept only if no kept (shorter) one accepts it.
        prefixes: list[str] = []
        for prefix in sorted({v[:-1] for v in given if v.endswith("*")},
                             key=lambda p: (len(p), p)):
            if not prefix.startswith(tuple(prefixes)):
                prefixes.append(prefix)
        kept = tuple(prefixes)
        exact = frozenset(v for v in given if not v.endswith("*")
                          and not (kept and v.startswith(kept)))
        return cls(exact, kept)

    def accepts(self, value: str) -> bool:
        """Whether ``value`` is one of the exact values or starts with a prefix."""
        return value in self.exact or (bool(self.prefixes) and value.startswith(self.prefixes))

    def covers(self, other: Accepted) -> bool:
        """Whether every value ``other`` accepts is accepted here.

        Conservative (False unless certain): ``other``'s prefix ``p`` accepts values of
        every length starting with ``p``, which no finite set of exact values holds, so it
        counts as covered only by a prefix here that ``p`` starts with (``a*`` covers
        ``ab*`` and ``abc``; the exact ``ab`` covers neither ``ab*`` nor ``a*``). Short of
        a prefix listed for every possible next character, that is also exact.
        """
        # With no prefix here, ``startswith(())`` is False: exact values cover no prefix.
        return (all(self.accepts(value) for value in other.exact)
                and all(prefix.startswith(self.prefixes) for prefix in other.prefixes))
