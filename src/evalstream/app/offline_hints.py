"""Why ``evalstream eval`` evaluated nothing, in words: the warnings it prints last.

A run whose every item matched no route, or was sampled out, ends in an empty table and
exit 0 (the config is valid and the input was read), with only a ``no_route`` or
``sampling`` count to tell. These hints say what the routes match on, or which rates
sampled the items out, and what to do about it. Pure: text from the summary and settings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from evalstream.app.offline_input import Item
from evalstream.app.offline_report import Summary
from evalstream.config import MatchRule, Settings

__all__ = ["invalid_gold_hint", "sampled_out_hint", "unrouted_hint"]

#: In the hint for an unrouted run: at most this many routes and app values, each app value
#: clipped to ``_HINT_CHARS`` (an app name is a short slicing key; a file may hold anything).
_HINT_ROUTES = 5
_HINT_APPS = 5
_HINT_CHARS = 60


def _values_text(name: str, values: list[str]) -> str:
    """What one field of a match accepts: ``app in ['a']``, ``app starting with 'b-'``..."""
    exact = [value for value in values if not value.endswith("*")]
    prefixes = [value[:-1] for value in values if value.endswith("*")]
    if "" in prefixes:
        return f"{name} present"
    said = [f"in {exact}"] if exact else []
    if prefixes:  # said in words: `in ['checkout-*']` reads as the literal value
        said.append(f"starting with {' or '.join(repr(prefix) for prefix in prefixes)}")
    text = f"{name} {' or '.join(said)}"
    return f"({text})" if len(said) > 1 else text


def _match_text(rule: MatchRule) -> str:
    """What a route's ``match`` accepts, in one line."""
    parts = [_values_text(name, values)
             for name, values in (("app", rule.app), ("topic", rule.topic))
             if values is not None]
    parts += [_values_text(f"attributes.{key}", [accepted] if isinstance(accepted, str)
                           else accepted)
              for key, accepted in rule.attributes.items()]
    if rule.requires:
        parts.append(f"non-empty {', '.join(rule.requires)}")
    return " and ".join(parts) or "any event"


def unrouted_hint(summary: Summary, settings: Settings, items: Sequence[Item],
                  topic: str) -> str | None:
    """Why nothing was evaluated, when routing is (part of) the reason; else None.

    Said when no item got a result and some matched no route: a config whose routes the
    input does not match (evaldata items routed by their data set as ``app``, a config
    matching ``app: [support-bot]``) otherwise ends in an empty table and exit 0, with only
    a ``no_route`` count to tell. The hint names what the routes match on and the items'
    ``app`` values, the usual mismatch.
    """
    unrouted = summary.skipped.get("no_route", 0)
    if not unrouted or summary.without_results < summary.items:
        return None
    why = ", ".join(f"{reason}: {n}" for reason, n in sorted(summary.skipped.items()))
    routes = "; ".join(f"{route.name}: {_match_text(route.match)}"
                       for route in settings.routes[:_HINT_ROUTES])
    if len(settings.routes) > _HINT_ROUTES:
        routes += f"; and {len(settings.routes) - _HINT_ROUTES} more"
    apps = Counter(item.event.app for item in items)
    shown = ", ".join(f"{'no app' if app is None else repr(app[:_HINT_CHARS])} ({n})"
                      for app, n in apps.most_common(_HINT_APPS))
    if len(apps) > _HINT_APPS:
        shown += f", and {len(apps) - _HINT_APPS} more"
    text = (f"nothing was evaluated: {unrouted} of {summary.items} items matched no route "
            f"({why}). An item goes to a route when its app, the topic it is routed as "
            f"({topic!r}: --topic, else the config's first input) and its attributes match "
            f"the route's `match`. The routes match: {routes}. The items' app values: "
            f"{shown}.")
    if any(item.dataset for item in items):
        text += (" evaldata items carry their data set's evaluator as app: route them with "
                 "`match: {app: [...]}`, or leave out --config to score each data set with "
                 "its own evaluator.")
    return text


def sampled_out_hint(summary: Summary, *, no_sampling: bool = False) -> str | None:
    """Why nothing was evaluated, when sampling is (part of) the reason; else None.

    eval samples as the worker does, so a config sampling live traffic at 1% scores about
    1% of a file, and a small file often none of it: an empty table and exit 0, with only
    a ``sampling`` count to tell. With ``no_sampling`` (``--no-sampling``) only a rate of 0
    samples an item out, and the hint says that instead.
    """
    sampled = summary.skipped.get("sampling", 0)
    if not sampled or summary.without_results < summary.items:
        return None
    text = f"nothing was evaluated: {sampled} of {summary.items} items were sampled out. "
    if no_sampling:
        return text + ("With --no-sampling, only a rate of 0 does that: sampling.rate, or "
                       "the rate of each route the items match (its sample_rate, or its "
                       "strata rate for the items' stratum), is 0, which turns it off.")
    return text + ("eval applies the config's sample rates as the worker does (sampling.rate "
                   "x each route's sample_rate or strata rate x an evaluator's sample_rate; "
                   "the same items on every run). Pass --no-sampling to score every routed "
                   "item (a rate of 0 still turns its route or stratum off).")


def invalid_gold_hint(summary: Summary) -> str | None:
    """That some items' gold labels were left out of the comparison, and what they must be.

    A label the evaluator cannot be compared with (``"yes"`` or ``1`` for a binary one, a
    boolean for a label one) is left out rather than counted as a miss; without a word the
    gold ``n`` would only be smaller than the items.
    """
    if not summary.invalid_gold:
        return None
    return (f"{summary.invalid_gold} gold labels were not compared: a binary evaluator's "
            "label must be true or false (a JSON boolean, or the text \"true\" or "
            "\"false\"), a label evaluator's one of its classes.")
