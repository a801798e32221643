"""Scrubbing a judge's credentials out of text a server sent back.

A gateway or a debugging proxy may echo what it received: the API key, the password in
``base_url`` (or the HTTP Basic token httpx makes of it), header and query values. Any text
from the server that can reach a log, an exception or a result (error messages, answer
text, top tokens) passes through :class:`Scrubber` first.
"""

from __future__ import annotations

import base64
from urllib.parse import quote, quote_plus

import httpx

from evalstream.config.judges import OpenAIJudgeConfig

__all__ = ["Scrubber"]

#: Header and query values shorter than this are not scrubbed from server messages: they
#: are flags and versions ("1", "true"), and scrubbing them would mangle every message.
_MIN_SCRUBBED_CHARS = 8


class Scrubber:
    """Replaces every credential of a judge's config, in each form a server may echo it in.

    Args:
        config: The judge's endpoint, headers and query.
        api_key: The resolved API key, if any.
    """

    def __init__(self, config: OpenAIJudgeConfig, api_key: str | None) -> None:
        url = httpx.URL(config.base_url)
        found = {api_key, url.password}
        if url.username or url.password:
            # httpx sends the user info as HTTP Basic credentials; some gateways take the
            # key as the user name (https://KEY@host), so a long one counts as a secret too.
            found.add(base64.b64encode(f"{url.username}:{url.password}".encode()).decode())
        found.update(v for v in (url.username, *config.headers.values(),
                                 *config.query.values())
                     if len(v) >= _MIN_SCRUBBED_CHARS)
        forms = {form for value in found if value
                 for form in (value, quote(value, safe=""), quote_plus(value))}
        # Longest first, so a value inside another is scrubbed after it.
        self._secrets = tuple(sorted(forms, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        """``text`` with every credential replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text
