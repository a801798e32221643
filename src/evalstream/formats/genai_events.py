"""Chat content carried by span events rather than span attributes (GenAI semconv <= 1.36,
and the >= 1.37 ``gen_ai.client.inference.operation.details`` event).

See :mod:`.genai_messages` for the :class:`~.genai_messages.Content` these readers fill and
the conventions, newest first.
"""

from __future__ import annotations

from typing import Any

from evalstream.events import load_json
from evalstream.formats.genai_messages import (
    AttrGetter,
    Content,
    add_messages,
    add_outputs,
    message_text,
    parts_text,
    read_semconv,
    structured,
)

# Values reach the readers as plain ``dict``/``list`` (from orjson or the converters), so
# ``isinstance(x, dict)`` is exact, and much cheaper than an ABC check on the hot path.

__all__ = ["read_semconv_events"]

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
            return message_text(parsed)
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
    body = structured(body, "gen_ai.event.content")
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
            text = message_text(body) if body is not None else _event_text(get("content"))
            # The semconv's ``role`` field: the author's actual role when it differs from
            # the event's (OpenLLMetry sends a ``developer`` prompt as gen_ai.user.message).
            actual = body.get("role") if body is not None else get("role")
            content = content or Content()
            content.add_turn(actual if isinstance(actual, str) and actual else role, text)
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
                add_messages(content, prompt, "gen_ai.prompt")
        elif name == "gen_ai.content.completion":
            completion = get("gen_ai.completion")
            if completion is not None:
                content = content or Content()
                add_outputs(content, completion, "gen_ai.completion")
    return content
