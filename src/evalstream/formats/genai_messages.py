"""Chat content readers for the GenAI conventions found on spans in the wild.

Each reader looks at one convention and returns a :class:`Content` when the span carries it,
``None`` when it does not. They receive attribute values already converted to plain Python
(``str``, ``int``, ``list``, ``dict``...) through an :class:`AttrGetter`, so they are shared
by the protobuf and the JSON decoders. Conventions, newest first:

* OTel GenAI semconv >= 1.37: ``gen_ai.input.messages`` / ``gen_ai.output.messages`` /
  ``gen_ai.system_instructions``, structured or JSON strings, messages made of ``parts``;
  the same attributes on the ``gen_ai.client.inference.operation.details`` span event.
* OTel GenAI semconv <= 1.27: span events ``gen_ai.content.prompt`` /
  ``gen_ai.content.completion`` holding OpenAI-style message JSON.
* OpenLLMetry (legacy flattened): ``gen_ai.prompt.N.role|content`` (or ``.user``),
  ``gen_ai.completion.N.role|content|finish_reason``.
* OpenInference: ``llm.input_messages.N.message.role|content`` (or
  ``...contents.K.message_content.text``), ``llm.output_messages...``, ``input.value`` /
  ``output.value``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalstream.events import dump_json, load_json

# Values reach the readers as plain ``dict``/``list`` (from orjson or the converters), so
# ``isinstance(x, dict)`` is exact, and much cheaper than an ABC check on the hot path.

__all__ = [
    "AttrGetter",
    "BadSpanError",
    "Content",
    "read_legacy",
    "read_openinference",
    "read_semconv",
    "read_semconv_events",
    "retrieval_documents",
]

#: Reads one attribute by key, converted to plain Python; ``None`` when absent.
AttrGetter = Callable[[str], Any]

#: Part types whose text is shown to evaluators. Reasoning, tool calls and blobs are not
#: what the user saw as the answer, so they are left out.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


class BadSpanError(ValueError):
    """A span carries content that does not parse; the span is skipped as ``bad_span``."""


@dataclass(slots=True)
class Content:
    """Chat content of one span, normalised.

    ``turns`` are the input messages other than system ones, as (role, text), in order;
    ``outputs`` the assistant text of each choice.
    """

    system: list[str] = field(default_factory=list)
    turns: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)

    def add_turn(self, role: str, text: str) -> None:
        """Add an input message; system messages become part of the system prompt."""
        if not text:
            return
        if role == "system" or role == "developer":
            self.system.append(text)
        else:
            # Gemini names the assistant "model"; evaluators only know "assistant".
            self.turns.append(("assistant" if role == "model" else role or "user", text))

    def merge(self, other: Content) -> None:
        """Append ``other``'s content (one span's content split over several events)."""
        self.system.extend(other.system)
        self.turns.extend(other.turns)
        self.outputs.extend(other.outputs)
        self.finish_reasons.extend(other.finish_reasons)

    def empty(self) -> bool:
        """True when no text was found at all."""
        return not (self.system or self.turns or self.outputs)


# --- helpers -------------------------------------------------------------------------------


def _structured(value: Any, what: str) -> Any:
    """A structured value, parsing it when it arrived as a JSON string."""
    if isinstance(value, str):
        try:
            return load_json(value)
        except ValueError as exc:
            raise BadSpanError(f"{what} is not valid JSON") from exc
    return value


def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return dump_json(value).decode()


def parts_text(parts: Any) -> str:
    """The text of a list of message parts (semconv ``parts`` or OpenAI ``content`` lists)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts: list[str] = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict):
            kind = part.get("type")
            if kind is None or kind in _TEXT_PARTS:
                text = part.get("content")
                if text is None:
                    text = part.get("text")
                if isinstance(text, str) and text:
                    texts.append(text)
            elif kind == "tool_call_response":
                # The spans.md example names it "result", the JSON schema "response".
                response = part.get("response", part.get("result"))
                if response is not None:
                    texts.append(_stringify(response))
    return "\n".join(texts)


def _message_text(message: dict[str, Any]) -> str:
    parts = message.get("parts")
    if parts is not None:
        return parts_text(parts)
    return parts_text(message.get("content"))


def _message_objects(messages: Any, what: str) -> list[dict[str, Any]]:
    """A messages attribute as a list of objects (one bare object counts as a list of one).

    Raises:
        BadSpanError: it is not a list of objects.
    """
    messages = _structured(messages, what)
    if isinstance(messages, dict):
        return [messages]
    if not isinstance(messages, list):
        raise BadSpanError(f"{what} is not a list of messages")
    if not all(isinstance(message, dict) for message in messages):
        raise BadSpanError(f"{what} holds a non-object message")
    return messages


def _tool_responses(parts: Any) -> tuple[list[dict[str, Any]], list[Any]] | None:
    """(tool_call_response parts, other parts) of a parts list that has any, else ``None``."""
    if not isinstance(parts, list):
        return None
    responses = [p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"]
    if not responses:
        return None
    return responses, [p for p in parts if not (isinstance(p, dict)
                                                and p.get("type") == "tool_call_response")]


def _add_messages(content: Content, messages: Any, what: str) -> None:
    """Add input messages (semconv ``parts`` or OpenAI ``content`` shape)."""
    for message in _message_objects(messages, what):
        role = message.get("role")
        role = role if isinstance(role, str) else "user"
        parts = message.get("parts")
        split = _tool_responses(parts) if role != "tool" else None
        if split is not None:
            # Anthropic and google-genai send tool results back in a "user" message (the
            # semconv keeps the provider's role): they are tool output, not the user asking.
            # Any text beside them is still the user's.
            responses, others = split
            content.add_turn("tool", parts_text(responses))
            content.add_turn(role, parts_text(others))
            continue
        content.add_turn(role, _message_text(message))


def _add_outputs(content: Content, messages: Any, what: str) -> None:
    """Add output messages: semconv ``[{role, parts, finish_reason}]``, OpenAI messages or
    OpenAI choices ``[{index, finish_reason, message}]``."""
    for message in _message_objects(messages, what):
        finish = message.get("finish_reason")
        inner = message.get("message")
        text = _message_text(inner) if isinstance(inner, dict) else _message_text(message)
        if text:
            content.outputs.append(text)
        if isinstance(finish, str) and finish:
            content.finish_reasons.append(finish)


def _add_system(content: Content, value: Any) -> None:
    if isinstance(value, str):
        stripped = value.lstrip()
        # Mostly a JSON list of parts, but a plain string is unambiguous enough to accept.
        if not stripped.startswith(("[", "{")):
            content.system.append(value)
            return
    value = _structured(value, "gen_ai.system_instructions")
    if isinstance(value, dict):
        value = [value]
    text = parts_text(value)
    if text:
        content.system.append(text)


def _maybe_parts(text: str) -> str:
    """Legacy/OpenInference content that is a JSON list of typed parts (multimodal) -> its
    text; anything else (including a user who typed JSON) is kept as it is."""
    if text.startswith("[{"):
        try:
            parsed = load_json(text)
        except ValueError:
            return text
        if isinstance(parsed, list) and all(isinstance(p, dict) and "type" in p
                                            for p in parsed):
            return parts_text(parsed)  # image-only turns have no text to judge
    return text


# --- readers -------------------------------------------------------------------------------

_INPUT = "gen_ai.input.messages"
_OUTPUT = "gen_ai.output.messages"
_SYSTEM = "gen_ai.system_instructions"


def read_semconv(get: AttrGetter) -> Content | None:
    """Semconv >= 1.37 attributes, on the span or on the operation-details event."""
    inputs = get(_INPUT)
    outputs = get(_OUTPUT)
    system = get(_SYSTEM)
    if inputs is None and outputs is None and system is None:
        return None
    content = Content()
    if system is not None:
        _add_system(content, system)
    if inputs is not None:
        _add_messages(content, inputs, _INPUT)
    if outputs is not None:
        _add_outputs(content, outputs, _OUTPUT)
    return content


_DETAILS = "gen_ai.client.inference.operation.details"
#: Semconv 1.28-1.36 message events (Azure AI Inference / Agents, Strands, as span events).
_ROLE_EVENTS = {
    "gen_ai.system.message": "system", "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool",
}


def _event_text(value: Any) -> str:
    """Text of a message event's ``content`` / a choice's ``message``: plain text, a message
    object, or a JSON list of content blocks (Strands: ``[{"text": ...}]``)."""
    parsed = value
    if isinstance(value, str):
        if not value.startswith(("[{", "{")):
            return value
        try:
            parsed = load_json(value)
        except ValueError:
            return value  # a user who typed braces
    if isinstance(parsed, dict):
        if "content" in parsed or "parts" in parsed:
            return _message_text(parsed)
        if "text" in parsed:
            return parts_text([parsed])
    elif isinstance(parsed, list) and all(isinstance(block, dict) for block in parsed):
        return parts_text(parsed)
    return value if isinstance(value, str) else ""


def _event_body(get: AttrGetter) -> dict[str, Any] | None:
    """Azure's JSON ``gen_ai.event.content`` body of a message or choice event."""
    body = get("gen_ai.event.content")
    if body is None:
        return None
    body = _structured(body, "gen_ai.event.content")
    return body if isinstance(body, dict) else None


def _add_choice(content: Content, get: AttrGetter) -> None:
    """A ``gen_ai.choice`` event: ``{index, finish_reason, message}`` as a JSON body or as
    the event's attributes (``message`` a message object or content blocks)."""
    body = _event_body(get)
    if body is not None:
        message, finish = body.get("message"), body.get("finish_reason")
    else:
        message, finish = get("message"), get("finish_reason")
    text = _event_text(message) if message is not None else ""
    if text:
        content.outputs.append(text)
    if isinstance(finish, str) and finish:
        content.finish_reasons.append(finish)


def read_semconv_events(events: list[tuple[str, AttrGetter]]) -> Content | None:
    """Span events: ``gen_ai.client.inference.operation.details`` (>= 1.37; all of them,
    as Strands sends system instructions, input and output as separate events), the
    per-message ``gen_ai.{system,user,assistant,tool}.message`` / ``gen_ai.choice``
    (1.28-1.36), or ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` (<= 1.27)."""
    content: Content | None = None
    for name, get in events:
        role = _ROLE_EVENTS.get(name)
        if role is not None:
            body = _event_body(get)
            text = _message_text(body) if body is not None else _event_text(get("content"))
            content = content or Content()
            content.add_turn(role, text)
        elif name == "gen_ai.choice":
            content = content or Content()
            _add_choice(content, get)
        elif name == _DETAILS:
            found = read_semconv(get)
            if found is not None:
                if content is None:
                    content = found
                else:
                    content.merge(found)
        elif name == "gen_ai.content.prompt":
            prompt = get("gen_ai.prompt")
            if prompt is not None:
                content = content or Content()
                _add_messages(content, prompt, "gen_ai.prompt")
        elif name == "gen_ai.content.completion":
            completion = get("gen_ai.completion")
            if completion is not None:
                content = content or Content()
                _add_outputs(content, completion, "gen_ai.completion")
    return content


def read_legacy(get: AttrGetter) -> Content | None:
    """OpenLLMetry's flattened ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``."""
    content: Content | None = None
    i = 0
    while True:
        role = get(f"gen_ai.prompt.{i}.role")
        text = get(f"gen_ai.prompt.{i}.content")
        if text is None and role is None:
            # Completion-style instrumentations (OpenAI completions, Bedrock, Cohere...)
            # write the prompt as ``gen_ai.prompt.N.user``.
            text = get(f"gen_ai.prompt.{i}.user")
            if text is None:
                break
        content = content or Content()
        content.add_turn(str(role or "user"), _maybe_parts(_stringify(text)))
        i += 1
    i = 0
    while True:
        text = get(f"gen_ai.completion.{i}.content")
        finish = get(f"gen_ai.completion.{i}.finish_reason")
        if text is None and finish is None and get(f"gen_ai.completion.{i}.role") is None:
            break
        content = content or Content()
        if text is not None:
            out = _maybe_parts(_stringify(text))
            if out:
                content.outputs.append(out)
        if finish is not None:
            content.finish_reasons.append(str(finish))
        i += 1
    return content


def _oi_messages(get: AttrGetter, prefix: str) -> list[tuple[str, str]]:
    """OpenInference flattened messages under ``prefix`` (``llm.input_messages``...)."""
    found: list[tuple[str, str]] = []
    i = 0
    while True:
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
                if part_text is None and get(part + "type") is None:
                    break
                if part_text:
                    texts.append(str(part_text))
                k += 1
            if role is None and k == 0:
                break
            text = "\n".join(texts)
        found.append((str(role or ""), _maybe_parts(_stringify(text))))
        i += 1
    return found


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else None


def _blocks_text(blocks: Any) -> str | None:
    """Text blocks of an Anthropic ``content`` or a Responses message ``content`` list
    (``None`` when it is not such a list: tool_use-only lists give ``""``)."""
    if not isinstance(blocks, list):
        return None
    return parts_text([b for b in blocks if isinstance(b, dict)
                       and b.get("type") in _TEXT_PARTS])


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
            return _message_text(message)
        return _stringify(choice.get("text"))
    if "content" in body and body.get("type") == "message":  # Anthropic Messages
        return _blocks_text(body["content"])
    output = body.get("output")
    if isinstance(output, list):  # OpenAI Responses: messages among reasoning / tool items
        texts = [_blocks_text(item.get("content")) or "" for item in output
                 if isinstance(item, dict) and item.get("type") == "message"]
        return "\n".join(t for t in texts if t)
    generation = _first(_first(body.get("generations")))
    if isinstance(generation, dict):  # LangChain LLMResult
        return _stringify(generation.get("text"))
    return None


def _last_user(messages: list[Any]) -> str | None:
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") in ("user", None):
            text = _message_text(message)
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
    text = _stringify(value)
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


def read_openinference(get: AttrGetter) -> Content | None:
    """OpenInference ``llm.input_messages`` / ``llm.output_messages`` / ``input.value``."""
    inputs = _oi_messages(get, "llm.input_messages")
    outputs = _oi_messages(get, "llm.output_messages")
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


def retrieval_documents(get: AttrGetter) -> list[str]:
    """Retrieved document texts on a span: OpenInference ``retrieval.documents.N.document.
    content`` or semconv ``gen_ai.retrieval.documents`` (list of ``{content|text, ...}``)."""
    docs: list[str] = []
    i = 0
    while True:
        text = get(f"retrieval.documents.{i}.document.content")
        if text is None:
            break
        if text:
            docs.append(_stringify(text))
        i += 1
    if docs:
        return docs
    value = get("gen_ai.retrieval.documents")
    if value is None:
        return docs
    try:
        value = _structured(value, "gen_ai.retrieval.documents")
    except BadSpanError:
        return docs
    if isinstance(value, list):
        for doc in value:
            if isinstance(doc, dict):
                text = doc.get("content", doc.get("text"))
                if isinstance(text, str) and text:
                    docs.append(text)
            elif isinstance(doc, str) and doc:
                docs.append(doc)
    return docs
