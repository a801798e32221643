"""Chat content of the OpenInference convention: the flattened ``llm.input_messages`` /
``llm.output_messages`` attributes and, when a span does not list messages, the raw
``input.value`` / ``output.value`` request and response bodies it records (OpenAI chat,
completions and Responses, Anthropic Messages, LangChain LLM results), unwrapped to the
question and the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evalstream.events import load_json
from evalstream.formats.genai_messages import (
    TEXT_PARTS,
    AttrGetter,
    Content,
    maybe_parts,
    message_text,
    parts_text,
    stringify,
)

# Values reach the readers as plain ``dict``/``list`` (from orjson or the converters), so
# ``isinstance(x, dict)`` is exact, and much cheaper than an ABC check on the hot path.

__all__ = ["read_openinference"]


_INPUTS = "llm.input_messages"
_OUTPUTS = "llm.output_messages"
_LISTS = (_INPUTS + ".", _OUTPUTS + ".")
_SKIP_IN, _SKIP_OUT = len(_LISTS[0]), len(_LISTS[1])
#: An index with more digits names no message (no list is that long): past 4,300 digits
#: ``int()`` raises ValueError, and one such key dropped the whole span as ``bad_span``.
_MAX_INDEX_DIGITS = 9


def _oi_indices(keys: Iterable[str]) -> tuple[list[int], list[int]]:
    """The indices of the input and of the output messages the keys list, ascending.

    Read from the keys rather than counted up from 0: OpenInference leaves gaps. Its
    Responses API reader numbers ``input`` items from 1 (0 is kept for ``instructions``)
    and writes nothing for items it does not map (``item_reference``, MCP and other tool
    items), so a count stopping at the first gap lost the later turns, the user's question
    among them (openinference-instrumentation-openai 0.1.66). One pass for both lists: this
    runs for every OpenInference span with content.
    """
    inputs: set[int] = set()
    outputs: set[int] = set()
    for key in keys:
        if key.startswith(_LISTS):
            found, skip = (inputs, _SKIP_IN) if key[4] == "i" else (outputs, _SKIP_OUT)
            dot = key.find(".", skip)  # a key without a field after the index holds nothing
            head = key[skip:dot]
            if skip < dot <= skip + _MAX_INDEX_DIGITS and head.isascii() and head.isdigit():
                found.add(int(head))
    return sorted(inputs), sorted(outputs)


def _oi_messages(get: AttrGetter, prefix: str, indices: list[int]) -> list[tuple[str, str]]:
    """OpenInference flattened messages under ``prefix`` (``llm.input_messages``...)."""
    found: list[tuple[str, str]] = []
    for i in indices:
        base = f"{prefix}.{i}.message."
        role = get(base + "role")
        text = get(base + "content")
        if text is None:
            # Multimodal messages list their parts under contents.K.message_content.*.
            texts: list[str] = []
            k = 0
            while True:
                part = f"{base}contents.{k}.message_content."
                part_text = get(part + "text")
                kind = get(part + "type")
                if part_text is None and kind is None:
                    break
                # A "reasoning" part (the Responses API's reasoning summary) is not what
                # the user was shown: its text was taken as the answer. (Other types are
                # kept: a part of a type not known here may well be shown text.)
                if part_text and kind != "reasoning":
                    texts.append(str(part_text))
                k += 1
            text = "\n".join(texts)
        if role is None and not text:
            # An index holding neither (only a tool call's or a name's fields) lists no
            # message: counted as one, it kept the raw input.value from standing in.
            continue
        found.append((str(role or ""), maybe_parts(stringify(text))))
    return found


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else None


def _blocks_text(blocks: Any) -> str | None:
    """Text blocks of an Anthropic ``content`` or a Responses message ``content`` list
    (``None`` when it is not such a list: tool_use-only lists give ``""``)."""
    if not isinstance(blocks, list):
        return None
    return parts_text([b for b in blocks if isinstance(b, dict)
                       and b.get("type") in TEXT_PARTS])


def _response_text(body: dict[str, Any]) -> str | None:
    """The answer in a known response body, ``""`` when it has none (a tool call only),
    ``None`` when the shape is unknown."""
    choices = body.get("choices")
    if isinstance(choices, list):  # OpenAI chat and completions
        choice = _first(choices)
        if not isinstance(choice, dict):
            return ""
        message = choice.get("message")
        if isinstance(message, dict):
            return message_text(message)
        return stringify(choice.get("text"))
    if "content" in body and body.get("type") == "message":  # Anthropic Messages
        return _blocks_text(body["content"])
    output = body.get("output")
    if isinstance(output, list):  # OpenAI Responses: messages among reasoning / tool items
        texts = [_blocks_text(item.get("content")) or "" for item in output
                 if isinstance(item, dict) and item.get("type") == "message"]
        return "\n".join(t for t in texts if t)
    generation = _first(_first(body.get("generations")))
    if isinstance(generation, dict):  # LangChain LLMResult
        return stringify(generation.get("text"))
    return None


def _last_user(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") in ("user", None):
            text = message_text(message)
            if text:
                return text
    return None


def _request_text(body: dict[str, Any]) -> str | None:
    """The user's question in a known request body, ``None`` when not found."""
    messages = body.get("messages")  # OpenAI chat, Anthropic Messages
    if isinstance(messages, list):
        return _last_user(messages)
    request = body.get("input")  # OpenAI Responses: a string or a list of messages
    if isinstance(request, str):
        return request
    if isinstance(request, list):
        return _last_user(request)
    prompt = body.get("prompt", body.get("prompts"))  # completions, LangChain LLMs
    if isinstance(prompt, list):
        prompt = prompt[-1] if prompt else None
    return prompt if isinstance(prompt, str) else None


def _oi_value(get: AttrGetter, key: str, output: bool) -> str | None:
    """``input.value`` / ``output.value``; JSON request/response bodies are unwrapped, and a
    body whose shape is not known gives ``None``: its JSON is not what the user saw."""
    value = get(key)
    if value is None:
        return None
    text = stringify(value)
    mime = get(key.replace(".value", ".mime_type"))
    if mime == "text/plain" or (mime != "application/json" and not text.startswith("{")):
        return text
    try:
        body = load_json(text)
    except ValueError:
        return text
    if isinstance(body, str):
        return body
    if isinstance(body, dict):
        return (_response_text if output else _request_text)(body) or None
    return None


def read_openinference(get: AttrGetter, keys: Iterable[str]) -> Content | None:
    """OpenInference ``llm.input_messages`` / ``llm.output_messages`` / ``input.value``.

    Args:
        get: Reads one attribute.
        keys: The span's attribute keys (where the listed messages are found).
    """
    input_indices, output_indices = _oi_indices(keys)
    inputs = _oi_messages(get, _INPUTS, input_indices)
    outputs = _oi_messages(get, _OUTPUTS, output_indices)
    content = Content()
    for role, text in inputs:
        content.add_turn(role or "user", text)
    for _role, text in outputs:
        if text:
            content.outputs.append(text)
    # The raw bodies only stand in for messages the span does not list: a listed reply
    # without text (a tool call) has no answer to judge, whatever the body holds.
    if not inputs:
        value = _oi_value(get, "input.value", output=False)
        if value:
            content.turns.append(("user", value))
    if not outputs:
        value = _oi_value(get, "output.value", output=True)
        if value:
            content.outputs.append(value)
    return None if content.empty() else content
