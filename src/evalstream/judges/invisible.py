"""Characters a reader does not see, shared by the judge prompt and the builtin judge.

Invisible format characters (Unicode category Cf: soft hyphen, zero-width, bidi controls,
word joiners, tag characters...) are skipped by a reader and by a model, so
"ig<ZWSP>nore" still reads "ignore" while it defeats a pattern, and tag characters spell
hidden ASCII to some models. The prompt escapes them; the builtin judge drops them.

The tables are Unicode 15's Cf set, written out because ``re`` has no ``\\p{Cf}`` and a
class built from ``unicodedata`` at import would scan all 1.1M code points. A unit test
checks they cover the running Python's Cf set, so a Unicode upgrade that adds some fails
there rather than silently. The characters above U+FFFF are a class of their own: a class
holding them scans about 4x slower, so it runs only on text that has such characters
(:func:`has_astral`).
"""

from __future__ import annotations

__all__ = ["FORMAT_ASTRAL", "FORMAT_BMP", "has_astral"]

#: Cf characters up to U+FFFF, as the body of a regex character class.
FORMAT_BMP = ("\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
              "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb")
#: Cf characters above U+FFFF, as the body of a regex character class.
FORMAT_ASTRAL = ("\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
                 "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")


def has_astral(text: str) -> bool:
    """Whether ``text`` has a character above U+FFFF.

    Such a character takes two UTF-16 units: a C-speed test, unlike ``max(text)``.
    """
    return len(text.encode("utf-16-le", "surrogatepass")) != 2 * len(text)
