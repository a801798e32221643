"""The normalised chat :class:`Content` of a span, the parsing helpers every content reader
shares, and the readers for span attributes of the GenAI conventions.

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

This module reads the span attributes of semconv >= 1.37 and OpenLLMetry, and retrieval
documents; span events are read by :mod:`.genai_events`, OpenInference by
:mod:`.openinference`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalstream.events import dump_json, load_json

# Values reach the readers as plain ``dict``/``list`` (from orjson or the converters), so
# ``isinstance(x, dict)`` is exact, and much cheaper than an ABC check on the hot path.

__all__ = [
    "TEXT_PARTS",
    "AttrGetter",
    "BadSpanError",
    "Content",
    "add_messages",
    "add_outputs",
    "maybe_parts",
    "message_text",
    "parts_text",
    "read_legacy",
    "read_semconv",
    "retrieval_documents",
    "stringify",
    "structured",
]

#: Reads one attribute by key, converted to plain Python; ``None`` when absent.
AttrGetter = Callable[[str], Any]

#: Other stacks' names for the two sides of a conversation.
_ROLE_ALIASES = {"model": "assistant", "ai": "assistant", "human": "user"}

#: Part types whose text is shown to evaluators. Reasoning, tool calls and blobs are not
#: what the user saw as the answer, so they are left out.
TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


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
        """Add an input message; system messages become part of the system prompt.

        Roles are read case-blind, and the names other stacks give the two sides
        (Gemini's ``model``, LangChain's ``human`` / ``ai``) become the ``user`` and
        ``assistant`` evaluators know; a message without a role is the user's.
        """
        if not text:
            return
        role = role.lower()
        if role == "system" or role == "developer":
            self.system.append(text)
        else:
            self.turns.append((_ROLE_ALIASES.get(role, role) or "user", text))

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


def structured(value: Any, what: str) -> Any:
    """A structured value, parsing it when it arrived as a JSON string."""
    if isinstance(value, str):
        try:
            return load_json(value)
        except ValueError as exc:
            raise BadSpanError(f"{what} is not valid JSON") from exc
    return value


def stringify(value: Any) -> str:
    """``value`` as text: strings as they are, None as ``""``, anything else as JSON."""
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
            if kind is None or kind in TEXT_PARTS:
                text = part.get("content")
                if text is None:
                    text = part.get("text")
                if isinstance(text, str) and text:
                    texts.append(text)
            elif kind == "tool_call_response":
                # The spans.md example names it "result", the JSON schema "response".
                response = part.get("response", part.get("result"))
                if response is not None:
                    texts.append(stringify(response))
    return "\n".join(texts)


def message_text(message: dict[str, Any]) -> str:
    """The text of one message object: its semconv ``parts`` or, failing them, its OpenAI
    ``content`` (a string or a list of parts)."""
    parts = message.get("parts")
    if parts is not None:
        return parts_text(parts)
    return parts_text(message.get("content"))


def _message_objects(messages: Any, what: str) -> list[dict[str, Any]]:
    """A messages attribute as a list of objects (one bare object counts as a list of one).

    Raises:
        BadSpanError: it is not a list of objects.
    """
    messages = structured(messages, what)
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


def add_messages(content: Content, messages: Any, what: str) -> None:
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
        content.add_turn(role, message_text(message))


def add_outputs(content: Content, messages: Any, what: str) -> None:
    """Add output messages: semconv ``[{role, parts, finish_reason}]``, OpenAI messages or
    OpenAI choices ``[{index, finish_reason, message}]``."""
    for message in _message_objects(messages, what):
        finish = message.get("finish_reason")
        inner = message.get("message")
        text = message_text(inner) if isinstance(inner, dict) else message_text(message)
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
    value = structured(value, "gen_ai.system_instructions")
    if isinstance(value, dict):
        value = [value]
    text = parts_text(value)
    if text:
        content.system.append(text)


def maybe_parts(text: str) -> str:
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
        add_messages(content, inputs, _INPUT)
    if outputs is not None:
        add_outputs(content, outputs, _OUTPUT)
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
        content.add_turn(str(role or "user"), maybe_parts(stringify(text)))
        i += 1
    i = 0
    while True:
        text = get(f"gen_ai.completion.{i}.content")
        finish = get(f"gen_ai.completion.{i}.finish_reason")
        if text is None and finish is None and get(f"gen_ai.completion.{i}.role") is None:
            break
        content = content or Content()
        if text is not None:
            out = maybe_parts(stringify(text))
            if out:
                content.outputs.append(out)
        if finish is not None:
            content.finish_reasons.append(str(finish))
        i += 1
    return content


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
            docs.append(stringify(text))
        i += 1
    if docs:
        return docs
    value = get("gen_ai.retrieval.documents")
    if value is None:
        return docs
    try:
        value = structured(value, "gen_ai.retrieval.documents")
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
