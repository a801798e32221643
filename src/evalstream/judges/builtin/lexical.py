"""Bag-of-stems text features for the topic and role scorers (no models, no downloads).

``stems`` lower-cases, drops stop words and strips common English suffixes so "booking",
"booked" and "books" meet. ``DOMAINS`` is a small hand-written map of everyday assistant
domains to stems; it lets a scope such as "cultural events, concerts and plays" recognise
"show", "ticket" and "venue" although the words differ.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from evalstream.judges.builtin._common import cache_short

__all__ = ["DOMAINS", "domain_profile", "overlap", "stem", "stems"]

_WORD = re.compile(r"[a-z][a-z']+")
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "ed", "es", "ly", "s")

_STOP_WORDS = """
a about above after again all also am an and any are aren't as at be because been before
being below between both but by can can't cannot could couldn't did didn't do does doesn't
doing don't down during each few for from further had hadn't has hasn't have haven't having
he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've
if in into is isn't it it's its itself let's me more most mustn't my myself no nor not of off
on once only or other ought our ours ourselves out over own same shan't she she'd she'll
she's should shouldn't so some such than that that's the their theirs them themselves then
there there's these they they'd they'll they're they've this those through to too under until
up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
where's which while who who's whom why why's will with won't would wouldn't you you'd you'll
you're you've your yours yourself yourselves okay ok yes yeah please thanks thank sure like
want need would could find get one two also anything something else help know tell let
great good fine well just really much many want wants wanted go going make see look
"""
_STOP = frozenset(_STOP_WORDS.split())


def stem(word: str) -> str:
    """A crude suffix-stripping stem (enough to match inflections of the same word)."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def stems(text: str) -> list[str]:
    """Content-word stems of ``text`` (stop words removed)."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 2]


def overlap(target: Iterable[str], reference: set[str]) -> float:
    """Fraction of ``target`` stems found in ``reference`` (0 when target is empty)."""
    items = list(target)
    if not items:
        return 0.0
    return sum(1 for s in items if s in reference) / len(items)


_DOMAIN_WORDS: dict[str, str] = {
    "travel": "flight fly airline airport depart departure return trip travel round-trip "
              "economy class seat passenger layover bus train station ticket journey "
              "destination visit attraction sightsee tourist museum park landmark",
    "lodging": "hotel room stay night check-in checkout star rating wifi lodging hostel "
               "apartment house rent guest bed smoke pet laundry reservation",
    "food": "restaurant food eat dinner lunch breakfast cuisine table menu dish reserve "
            "vegetarian pizza italian chinese indian mexican price moderate cheap cafe",
    "music": "song music album artist play playlist band singer track genre pop rock "
             "listen audio speaker concert",
    "movies": "movie film director actor actress cast watch theater theatre cinema "
              "showtime screen genre comedy drama thriller rating review subtitle online",
    "events": "event concert show play ticket venue theater game sport match festival "
              "performance seat date city",
    "weather": "weather temperature rain sunny forecast degree humidity wind cloudy snow "
               "humid celsius fahrenheit precipitation",
    "banking": "bank account balance transfer payment pay money card credit debit checking "
               "saving loan interest transaction fee",
    "health": "doctor dentist appointment clinic medical symptom medicine health hospital "
              "therapist insurance prescription",
    "rides": "ride taxi cab uber lyft driver pickup drop shared car rental vehicle "
             "pick-up sedan suv",
    "shopping": "buy order product shop store price delivery shipping return refund cart "
                "item size color discount",
    "calendar": "alarm calendar meeting schedule reminder event appointment time set",
    "tech": "computer software app password login install error bug update device phone "
            "laptop internet wifi code program",
    "homes": "property home house apartment visit bedroom bathroom rent buy lease realtor",
}


def _domain_stems() -> dict[str, frozenset[str]]:
    return {name: frozenset(stem(w) for w in words.split()) for name, words in
            _DOMAIN_WORDS.items()}


DOMAINS: dict[str, frozenset[str]] = _domain_stems()


@cache_short(max_chars=1_024, maxsize=4096)
def domain_profile(text: str) -> dict[str, int]:
    """How many stems of ``text`` fall in each domain (short texts cached: scopes repeat)."""
    counts: dict[str, int] = {}
    for s in stems(text):
        for name, vocab in DOMAINS.items():
            if s in vocab:
                counts[name] = counts.get(name, 0) + 1
    return counts
