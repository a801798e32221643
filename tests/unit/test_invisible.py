"""The invisible-character tables shared by the judge prompt and the builtin judge."""

from __future__ import annotations

import re
import sys
import unicodedata

from evalstream.judges.invisible import FORMAT_ASTRAL, FORMAT_BMP, has_astral


def test_tables_cover_every_format_character_of_this_python() -> None:
    # A Python with a newer Unicode may add Cf characters: this fails until they are listed.
    bmp, astral = re.compile(f"[{FORMAT_BMP}]"), re.compile(f"[{FORMAT_ASTRAL}]")
    missing = [f"U+{c:04X}" for c in range(sys.maxunicode + 1)
               if unicodedata.category(chr(c)) == "Cf"
               and not (bmp if c < 0x10000 else astral).fullmatch(chr(c))]
    assert missing == [], f"Unicode {unicodedata.unidata_version}: add {missing}"


def test_tables_hold_only_format_characters_and_each_in_its_plane() -> None:
    listed = [c for c in range(sys.maxunicode + 1)
              if re.fullmatch(f"[{FORMAT_BMP}{FORMAT_ASTRAL}]", chr(c))]
    assert all(c < 0x10000 for c in listed if re.fullmatch(f"[{FORMAT_BMP}]", chr(c)))
    assert all(c >= 0x10000 for c in listed if re.fullmatch(f"[{FORMAT_ASTRAL}]", chr(c)))
    # Unicode 15 added U+13439-1343F (Egyptian hieroglyph controls); older Pythons call
    # them unassigned (Cn), which is no reason to let them through.
    assert {unicodedata.category(chr(c)) for c in listed} <= {"Cf", "Cn"}


def test_has_astral() -> None:
    assert not has_astral("")
    assert not has_astral("plain ascii, caf\u00e9, \uffff")
    assert has_astral("a\U0001F600b")
    assert has_astral("\U000e0041")
