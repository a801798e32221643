"""Shared hypothesis strategies and settings for the ``test_fuzz_*`` property tests.

The settings are fixed (``derandomize``: the same examples on every run, so CI never fails
on a new draw) and small: the property tests of each area run in a few seconds. Any crash
found is also pinned as a plain example test next to its property.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

__all__ = [
    "ADVERSARIAL_STRINGS",
    "FUZZ",
    "adversarial_text",
    "json_bytes",
    "json_values",
    "mutate",
    "odd_json_documents",
    "paths",
    "strict_json_values",
    "strict_text",
]

# EVALSTREAM_FUZZ_EXPLORE=1: no shrinking, for a quick look at what fails, and
# EVALSTREAM_FUZZ_EXAMPLES=N: a longer hunt. Neither is for CI, which runs the defaults.
if os.environ.get("EVALSTREAM_FUZZ_EXPLORE"):
    settings.register_profile("explore", phases=[Phase.explicit, Phase.generate])
    settings.load_profile("explore")

#: Deterministic and fast. ``database=None``: nothing written to ``.hypothesis/``.
FUZZ = settings(max_examples=int(os.environ.get("EVALSTREAM_FUZZ_EXAMPLES", "60")),
                deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Strings that have broken parsers and encoders before: NUL, lone surrogates, BOM,
#: right-to-left marks, combining marks, astral characters, JSON-looking text, huge ones.
ADVERSARIAL_STRINGS: tuple[str, ...] = (
    "", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\ufeff", "\u202e", "e\u0301",
    "\U0001f600", "\u2028\u2029", "null", "[", "{", "[{", '[{"type": "text"}]',
    '{"choices": []}', "NaN", "Infinity", "-0", "1e999", "9" * 400, "x" * 20_000,
    "user", "assistant", "system", "other",
)

def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


# Every code point, surrogates included (hypothesis leaves category Cs out by default).
_ANY_CHAR = st.characters(exclude_categories=())

#: Text that may hold anything: the adversarial constants, arbitrary code points, or long
#: repeats of them.
adversarial_text = st.one_of(
    st.sampled_from(ADVERSARIAL_STRINGS),
    st.text(_ANY_CHAR, max_size=40),
    st.text(max_size=20),
    st.builds(lambda s, n: s * n, st.text(_ANY_CHAR, min_size=1, max_size=3),
              st.integers(1, 3000)),
)

_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(2**200), max_value=2**200),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63, -(2**63) - 1, 2**64, 1e308, -1e308, 5e-324, math.inf,
                     -math.inf, math.nan]),
)

#: Any JSON-ish Python value, with the odd ones JSON itself cannot hold (NaN, infinities,
#: lone surrogates) that a lenient encoder (``json.dumps``) still writes.
json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), _numbers, adversarial_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(adversarial_text, children, max_size=4),
    ),
    max_leaves=12,
)


#: JSON values a strict encoder (orjson) can write: finite numbers, no lone surrogates.
#: Mutations use these so that the document stays parseable and the walk goes deep.
strict_text = st.one_of(
    st.sampled_from([s for s in ADVERSARIAL_STRINGS if not _has_surrogate(s)]),
    st.text(max_size=40),
)
strict_json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
              st.floats(allow_nan=False, allow_infinity=False), strict_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(strict_text, children, max_size=4),
    ),
    max_leaves=12,
)


def _dumps(value: Any, ensure_ascii: bool) -> bytes:
    # ``json`` writes NaN/Infinity literals and lone surrogates (as escapes, or raw with
    # surrogatepass): exactly the inputs a strict parser must reject cleanly.
    return json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")


def json_bytes(values: st.SearchStrategy[Any] = json_values) -> st.SearchStrategy[bytes]:
    """``values`` serialised the lenient way (see :func:`_dumps`)."""
    return st.builds(_dumps, values, st.booleans())


def _nested(depth: int, opener: str) -> bytes:
    closer = {"[": "]", "{": "}"}[opener]
    if opener == "{":
        return ('{"a":' * depth + "1" + closer * depth).encode()
    return (opener * depth + closer * depth).encode()


#: JSON texts that are valid, or nearly, but odd: deep nesting, non-string keys, duplicate
#: keys, numbers past every range, trailing garbage, BOMs, NUL bytes.
odd_json_documents: st.SearchStrategy[bytes] = st.one_of(
    st.builds(_nested, st.sampled_from([10, 200, 1_000, 100_000]), st.sampled_from("[{")),
    st.sampled_from([
        b'{1: "x"}', b'{"output": "a", "output": 5}', b'{"output": 5, "output": "a"}',
        b'{"output": "' + b"9" * 5000 + b'"}', b'{"output": ' + b"9" * 5000 + b"}",
        b'{"output": 1e400}', b'{"output": -1e400}', b'{"output": NaN}',
        b'{"output": Infinity}', b'{"output": "\\ud800"}', b'{"output": "\xed\xa0\x80"}',
        b'{"output": "a"} trailing', b"\xef\xbb\xbf{\"output\": \"a\"}", b'{"output": "a\x00"}',
        b'{"output": "a\\u0000"}', b'{"output": "ok", "timestamp": 1e300}',
        b'{"output": "ok", "timestamp": -1e300}', b'{"output": "ok", "timestamp": "nope"}',
        b'{"output": "ok", "timestamp": 99999999999999999999999}', b"[]", b"null", b"0",
        b'"str"', b"\x00", b"\xff\xfe", b" ", b"{}", b'{"":""}',
        b'{"resourceSpans": 5}', b'{"resourceSpans": [5]}', b'{"resourceSpans": [{}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [5]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": 5}]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [5]}]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": 5}]}]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": [{"key": []}]}]}]}]}',
        b'{"resourceSpans": [{"resource": 5, "scopeSpans": [{"spans": [{}]}]}]}',
        b'{"resourceSpans": [{"resource": {"attributes": [{"key": {}}]}, '
        b'"scopeSpans": [{"spans": [{}]}]}]}',
    ]),
)


def paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``node`` (dict keys and list indexes), root first."""
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(paths(value, (*path, key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(paths(value, (*path, i)))
    return found


@st.composite
def mutate(draw: st.DrawFn, document: Any,
           values: st.SearchStrategy[Any] | None = None) -> Any:
    """``document`` (a JSON-like tree, left untouched) with 1-3 of its values replaced by
    ``values`` (default: :data:`strict_json_values`), deleted, or wrapped in a list."""
    values = strict_json_values if values is None else values
    doc = json.loads(json.dumps(document))
    for _ in range(draw(st.integers(1, 3))):
        where = paths(doc)[1:]
        if not where:
            return draw(values)
        path = draw(st.sampled_from(where))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "replace", "delete", "wrap"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "wrap":
            parent[path[-1]] = [parent[path[-1]]]
        else:
            parent[path[-1]] = draw(values)
    return doc

