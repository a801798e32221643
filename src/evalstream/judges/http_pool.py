"""The HTTP connections of one judge endpoint, sharded so that each pool stays small.

httpcore re-checks every pooled connection on each request event, so one pool of 64
connections costs ~20 ms of CPU per request at full load, while shards of 8 cost ~3 ms. A
LIFO queue of slots, one per allowed request, caps concurrency and hands out the most
recently used, warm connection first.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import certifi
import httpx

__all__ = ["MAX_BODY_BYTES", "SHARD_SIZE", "BodyTooLargeError", "ShardedClients",
           "post_bounded"]

#: The most connections one client (one httpcore pool) holds.
SHARD_SIZE = 8
#: The most bytes of a response body read, on the wire and once decoded. A judge's answer
#: is a few KB (llama.cpp echoes the prompt: still far below); without a limit httpx read
#: any body whole (50 MB peaked at 150 MB) and inflated any gzip body (a 49 KB one to
#: 150 MB, a doubly gzipped one without bound), per request in flight.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Of an error response: its message and error object (the client reads 1000 bytes).
_ERROR_BODY_BYTES = 64 * 1024
# The codings decoded here (zlib, bounded); httpx would advertise br/zstd when their
# packages are installed, which this reader does not decode.
_ACCEPT_ENCODING = "gzip, deflate"
_BODY_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class BodyTooLargeError(Exception):
    """A successful response's body is over the limit (on the wire or once decoded)."""


async def post_bounded(client: httpx.AsyncClient, url: str, payload: Any,
                       limit: int = MAX_BODY_BYTES) -> httpx.Response:
    """POST ``payload`` as JSON; the response with its body read and decoded, bounded.

    An error response's body is cut at 64 KiB (its start is all an error message
    needs); a successful one's over ``limit`` raises.

    Raises:
        BodyTooLargeError: a 2xx body over ``limit`` bytes, on the wire or decoded.
        httpx.DecodingError: a 2xx with a corrupt or unsupported ``Content-Encoding``.
        httpx.RequestError: what sending or reading raises.
    """
    async with client.stream("POST", url, json=payload) as response:
        if not response.is_success:
            limit = min(limit, _ERROR_BODY_BYTES)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            chunks.append(chunk)
            if size > limit:
                if response.is_success:
                    raise BodyTooLargeError(f"more than {limit} bytes")
                break
    data = b"".join(chunks)
    if len(data) > limit:
        data = data[:limit]
    codings = [c.strip().lower() for c in response.headers.get("content-encoding", "")
               .split(",") if c.strip()]
    try:
        for coding in reversed(codings):  # applied in the order listed: undone last first
            data = _decode(data, coding, limit, strict=response.is_success)
    except httpx.DecodingError:
        if response.is_success:
            raise
        # An error status is classified by its status, whatever its body holds: a 400
        # with a corrupt gzip body is still a 400 (not retried), not a transport error.
        data = b""
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in _BODY_HEADERS]
    return httpx.Response(response.status_code, headers=headers, content=data,
                          request=response.request)


def _decode(data: bytes, coding: str, limit: int, *, strict: bool) -> bytes:
    """``data`` with one content coding undone, at most ``limit`` bytes of it."""
    if coding == "identity":
        return data
    if coding not in ("gzip", "x-gzip", "deflate"):
        raise httpx.DecodingError(f"unsupported content encoding {coding[:20]!r}")
    try:
        # A gzip or zlib header (detected); "deflate" is raw deflate on some servers.
        out = zlib.decompressobj(zlib.MAX_WBITS | 32).decompress(data, limit + 1)
    except zlib.error as exc:
        if coding != "deflate":
            raise httpx.DecodingError(f"corrupt {coding} body: {exc}") from None
        try:
            out = zlib.decompressobj(-zlib.MAX_WBITS).decompress(data, limit + 1)
        except zlib.error as raw_exc:
            raise httpx.DecodingError(f"corrupt deflate body: {raw_exc}") from None
    if len(out) > limit and strict:
        raise BodyTooLargeError(f"more than {limit} bytes once decoded")
    return out[:limit]


class ShardedClients:
    """``httpx.AsyncClient``s for one endpoint, at most ``max_connections`` requests at once.

    Args:
        base_url: The endpoint's base URL; request paths are relative to it.
        headers: Sent with every request (the API key among them).
        params: Query parameters sent with every request.
        timeout_s: httpx's timeout for each phase of a request.
        max_connections: Requests in flight at once, spread over clients of at most
            ``SHARD_SIZE`` connections each.
    """

    def __init__(self, base_url: str, *, headers: Mapping[str, str],
                 params: Mapping[str, str], timeout_s: float, max_connections: int) -> None:
        shards = max(1, -(-max_connections // SHARD_SIZE))
        sizes = [max_connections // shards + (1 if i < max_connections % shards else 0)
                 for i in range(shards)]
        # One TLS context for all shards (loading the CA bundle costs ~50 ms each time).
        verify: ssl.SSLContext | bool = (
            ssl.create_default_context(cafile=certifi.where())
            if base_url.startswith("https://") else False)
        self._clients = [
            httpx.AsyncClient(
                base_url=base_url.rstrip("/") + "/",
                headers={"Accept-Encoding": _ACCEPT_ENCODING, **headers}, verify=verify,
                params=dict(params), timeout=timeout_s,
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size))
            for size in sizes]
        self._slots: asyncio.LifoQueue[int] = asyncio.LifoQueue()
        for shard, size in enumerate(sizes):
            for _ in range(size):
                self._slots.put_nowait(shard)

    @asynccontextmanager
    async def client(self, hold: Callable[[Callable[[], Awaitable[int]]], Awaitable[int]]
                     | None = None) -> AsyncIterator[httpx.AsyncClient]:
        """Wait for a free slot; the client to send one request with, until the block ends.

        Args:
            hold: How to wait when no slot is free: ``hold(get)`` awaits ``get()``, e.g.
                where a stop can cancel the wait (``waits.StoppableWaits.wait``). Not
                called when a slot is free: that request goes at once.
        """
        slots = self._slots
        shard = await (slots.get() if hold is None or not slots.empty() else hold(slots.get))
        try:
            yield self._clients[shard]
        finally:
            self._slots.put_nowait(shard)

    async def aclose(self) -> None:
        """Close every client (their pooled connections)."""
        for client in self._clients:
            await client.aclose()
