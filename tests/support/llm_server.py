"""Local OpenAI-compatible HTTP servers on real sockets, speaking each provider's wire format.

``FakeLLM`` is a minimal HTTP/1.1 server (``asyncio.start_server``, keep-alive, Content-Length
bodies) that answers like the real thing:

* ``openai_chat``        OpenAI ``/chat/completions`` (``logprobs.content[].top_logprobs``)
* ``openai_completions`` OpenAI legacy ``/completions`` (``top_logprobs`` list of dicts)
* ``vllm_chat``          vLLM's chat shape (adds ``stop_reason``, ``prompt_logprobs``)
* ``vllm_completions``   vLLM's legacy completions shape
* ``llamacpp_chat``      llama.cpp server ``/v1/chat/completions`` (entries carry ``id``)
* ``llamacpp_native``    llama.cpp ``/completion`` with ``n_probs`` (current:
  ``completion_probabilities[].top_logprobs[{id, token, bytes, logprob}]``)
* ``llamacpp_native_old`` older llama.cpp ``/completion`` (``probs[{tok_str, prob}]``)

It misbehaves on demand: queue faults with :meth:`FakeLLM.fail_next` (``"429"`` with
``Retry-After``, ``"quota"`` (a 429 saying ``insufficient_quota``), ``"500"``, ``"timeout"``
(answers too late), ``"reset"`` (drops the connection), ``"nonjson"``, ``"nologprobs"``,
``"nooptions"``, ``"401"``, ``"400"``), or set
``always`` to one of them. It records every request body and header set, and the highest
number of requests it was serving at once (``max_concurrent``), so tests assert limits at
the server, not in the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["STYLES", "FakeLLM", "Received", "llm_server", "serving"]

STYLES = ("openai_chat", "openai_completions", "vllm_chat", "vllm_completions",
          "llamacpp_chat", "llamacpp_native", "llamacpp_native_old")

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes
    at: float


@dataclass
class FakeLLM:
    """A scripted OpenAI-compatible server. Use :func:`llm_server` to run one."""

    style: str = "openai_chat"
    #: First-token distribution the "model" answers with (token -> probability).
    distribution: dict[str, float] = field(
        default_factory=lambda: {"Yes": 0.7, " yes": 0.1, "No": 0.15, " maybe": 0.05})
    #: Optional per-request override: body -> distribution.
    decide: Callable[[Any], dict[str, float]] | None = None
    #: The content returned when the request is not a 1-token logprob request.
    text: str = '{"output": "yes"}'
    delay_s: float = 0.0
    #: The prompt tokens every answer reports (default: about a token per 4 body bytes);
    #: a fixed count gives tests exact usage and cost figures.
    prompt_tokens: int | None = None
    timeout_delay_s: float = 5.0
    #: The 429's Retry-After header ("" sends none).
    retry_after: str = "0"
    always: str | None = None
    received: list[Received] = field(default_factory=list)
    concurrent: int = 0
    max_concurrent: int = 0
    _faults: deque[str] = field(default_factory=deque)
    _server: asyncio.Server | None = None
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    port: int = 0

    @property
    def url(self) -> str:
        """Base URL to configure a judge with (``/v1`` for OpenAI-style servers)."""
        base = f"http://127.0.0.1:{self.port}"
        return base if self.style.startswith("llamacpp_native") else base + "/v1"

    def fail_next(self, *faults: str) -> None:
        """Queue faults for the next requests, in order."""
        self._faults.extend(faults)

    @property
    def posts(self) -> list[Received]:
        """Requests received (all are POSTs)."""
        return [r for r in self.received if r.method == "POST"]

    async def start(self) -> None:
        """Listen on a free loopback port; after :meth:`stop`, on the same port again (a
        judge that comes back after refusing connections)."""
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await asyncio.wait_for(self._server.wait_closed(), 2)

    # --- HTTP -------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in
                           (line.split(":", 1) for line in lines[1:] if ":" in line)}
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                self.received.append(Received(method, path, headers, body, raw, time.time()))
                self.concurrent += 1
                self.max_concurrent = max(self.max_concurrent, self.concurrent)
                try:
                    keep = await self._respond(writer, path, body, headers)
                finally:
                    self.concurrent -= 1
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError,
                asyncio.CancelledError):
            return
        finally:
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _respond(self, writer: asyncio.StreamWriter, path: str, body: Any,
                       headers: dict[str, str]) -> bool:
        fault = self._faults.popleft() if self._faults else self.always
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if fault == "reset":
            writer.transport.abort()
            return False
        if fault == "timeout":
            await asyncio.sleep(self.timeout_delay_s)
            return False
        if fault == "429":
            await self._send(writer, 429, {"error": {"message": "Rate limit reached",
                                                     "type": "requests"}},
                             {"Retry-After": self.retry_after} if self.retry_after else None)
            return True
        if fault == "quota":
            # OpenAI's answer to an account out of credit: a 429 that is not rate limiting.
            await self._send(writer, 429, {"error": {
                "message": "You exceeded your current quota, please check your plan and "
                           "billing details.",
                "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}},
                             {"Retry-After": self.retry_after} if self.retry_after else None)
            return True
        if fault in ("500", "503"):
            await self._send(writer, int(fault), {"error": {"message": "upstream overloaded"}})
            return True
        if fault == "401":
            # Echo the credential back, as some gateways do, to prove the client scrubs it.
            key = headers.get("authorization", headers.get("api-key", "")).removeprefix("Bearer ")
            await self._send(writer, 401, {"error": {"message": f"Incorrect API key: {key}",
                                                     "type": "invalid_request_error"}})
            return True
        if fault == "400":
            await self._send(writer, 400, {"error": {"message": "bad model parameter"}})
            return True
        if fault == "nonjson":
            await self._send_raw(writer, 200, b"<html>502 Bad Gateway (proxy)</html>",
                                 "text/html")
            return True
        dist = self.decide(body) if self.decide else dict(self.distribution)
        if fault == "nooptions":
            dist = {"The": 0.6, "I": 0.3, "Based": 0.1}
        payload = self._payload(body if isinstance(body, dict) else {}, dist,
                                with_logprobs=fault != "nologprobs")
        await self._send(writer, 200, payload)
        return True

    async def _send(self, writer: asyncio.StreamWriter, status: int, payload: Any,
                    extra: dict[str, str] | None = None) -> None:
        await self._send_raw(writer, status, json.dumps(payload).encode(), "application/json",
                             extra)

    async def _send_raw(self, writer: asyncio.StreamWriter, status: int, data: bytes,
                        content_type: str, extra: dict[str, str] | None = None) -> None:
        head = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}",
                f"Content-Type: {content_type}", f"Content-Length: {len(data)}",
                "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in (extra or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()

    # --- provider shapes --------------------------------------------------------------

    def _payload(self, body: dict[str, Any], dist: dict[str, float],
                 with_logprobs: bool) -> dict[str, Any]:
        n = next(self._ids)
        wants_probs = bool(body.get("logprobs") or body.get("n_probs"))
        legacy_n = body.get("logprobs")
        top_n = int(body.get("top_logprobs") or body.get("n_probs") or
                    (legacy_n if isinstance(legacy_n, int) and legacy_n > 1 else 5))
        ranked = sorted(dist.items(), key=lambda kv: -kv[1])[:max(1, top_n)]
        first_token = ranked[0][0] if ranked else ""
        content = first_token if wants_probs else self.text
        prompt_tokens = self.prompt_tokens or max(1, len(json.dumps(body)) // 4)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 1,
                 "total_tokens": prompt_tokens + 1}
        give = with_logprobs and wants_probs
        style = self.style
        if style in ("openai_chat", "vllm_chat", "llamacpp_chat"):
            def entry(t: str, p: float, i: int) -> dict[str, Any]:
                return {**({"id": i} if style == "llamacpp_chat" else {}),
                        "token": t, "logprob": math.log(p), "bytes": list(t.encode())}

            logprobs: dict[str, Any] | None = None
            if give:
                top = [entry(t, p, i) for i, (t, p) in enumerate(ranked)]
                logprobs = {"content": [{**top[0], "top_logprobs": top}]}
                if style == "openai_chat":
                    logprobs["refusal"] = None
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length",
                                      "message": {"role": "assistant", "content": content},
                                      "logprobs": logprobs}
            if style == "vllm_chat":
                choice.update(stop_reason=None)
            out: dict[str, Any] = {"id": f"chatcmpl-{n}", "object": "chat.completion",
                                   "created": int(time.time()), "model": body.get("model"),
                                   "choices": [choice], "usage": usage}
            if style == "vllm_chat":
                out["prompt_logprobs"] = None
            return out
        if style in ("openai_completions", "vllm_completions"):
            legacy: dict[str, Any] | None = None
            if give:
                legacy = {"tokens": [first_token], "token_logprobs": [math.log(ranked[0][1])],
                          "top_logprobs": [{t: math.log(p) for t, p in ranked}],
                          "text_offset": [0]}
            choice = {"index": 0, "text": content, "logprobs": legacy, "finish_reason": "length"}
            if style == "vllm_completions":
                choice.update(stop_reason=None, prompt_logprobs=None)
            return {"id": f"cmpl-{n}", "object": "text_completion", "created": int(time.time()),
                    "model": body.get("model"), "choices": [choice], "usage": usage}
        native: dict[str, Any] = {"content": content, "stop": True, "model": "gguf",
                                  "tokens_predicted": 1, "tokens_evaluated": prompt_tokens}
        if give and style == "llamacpp_native":
            top = [{"id": i, "token": t, "bytes": list(t.encode()), "logprob": math.log(p)}
                   for i, (t, p) in enumerate(ranked)]
            native["completion_probabilities"] = [{**top[0], "top_logprobs": top}]
        elif give:
            native["completion_probabilities"] = [
                {"content": first_token, "probs": [{"tok_str": t, "prob": p} for t, p in ranked]}]
        return native


Served = TypeVar("Served", bound=FakeLLM)


@contextlib.asynccontextmanager
async def serving(server: Served) -> AsyncIterator[Served]:
    """Run ``server`` (a :class:`FakeLLM` or subclass) for the duration of the block."""
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def llm_server(style: str = "openai_chat", **kwargs: Any
               ) -> contextlib.AbstractAsyncContextManager[FakeLLM]:
    """Run a :class:`FakeLLM` on a free loopback port for the duration of the block."""
    return serving(FakeLLM(style=style, **kwargs))


def main() -> None:
    """Run a server in its own process (benchmarks): prints its port, serves until killed."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="Fake OpenAI-compatible judge server")
    parser.add_argument("--style", default="openai_chat", choices=STYLES)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before answering")
    args = parser.parse_args()

    async def serve() -> None:
        server = FakeLLM(style=args.style, delay_s=args.delay)
        await server.start()
        # Keep no per-request history in a long-running process.
        server.received = _Discard()
        print(server.port, flush=True)
        sys.stdout.close()
        await asyncio.Event().wait()

    asyncio.run(serve())


class _Discard(list[Received]):
    """A request log that keeps nothing (bounded memory for benchmarks)."""

    def append(self, item: Received) -> None:
        del item


if __name__ == "__main__":
    main()
