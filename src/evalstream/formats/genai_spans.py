"""Which spans are GenAI model calls, and the chat content a model-call span carries, read
from the first convention it uses (newest first).
"""

from __future__ import annotations

from evalstream.formats.genai_events import read_semconv_events
from evalstream.formats.genai_messages import Content, read_legacy, read_semconv
from evalstream.formats.openinference import read_openinference
from evalstream.formats.span_view import Attrs, SpanView, flat_text

__all__ = ["classify", "read_content"]

#: Where the kind of span is declared, most specific first.
_KIND_KEYS = ("gen_ai.operation.name", "llm.request.type", "openinference.span.kind")
#: Any of these without a declared kind still marks a model call (semconv <= 1.26 had no
#: operation name; flattened prompts may come without ``llm.request.type``).
_LLM_MARKERS = (
    "gen_ai.provider.name", "gen_ai.system", "gen_ai.request.model", "gen_ai.input.messages",
    "gen_ai.output.messages", "gen_ai.prompt.0.content", "gen_ai.prompt.0.role",
    "gen_ai.completion.0.content", "llm.model_name", "llm.input_messages.0.message.role",
    "gen_ai.prompt.0.user",
)
#: A span without any of these (and without events) carries no content: no reader can
#: find any, so they are not run.
_CONTENT_KEYS = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
    "gen_ai.prompt.0.role", "gen_ai.prompt.0.content", "gen_ai.prompt.0.user",
    "gen_ai.completion.0.content",
    "gen_ai.completion.0.role", "gen_ai.completion.0.finish_reason",
    "llm.input_messages.0.message.role", "llm.input_messages.0.message.content",
    "llm.input_messages.0.message.contents.0.message_content.text",
    "llm.input_messages.0.message.contents.0.message_content.type",
    "llm.output_messages.0.message.role", "llm.output_messages.0.message.content",
    "llm.output_messages.0.message.contents.0.message_content.text",
    "llm.output_messages.0.message.contents.0.message_content.type",
    "input.value", "output.value",
})


def classify(attrs: Attrs, kinds: frozenset[str]) -> tuple[str | None, str | None]:
    """(operation, skip reason); reason ``None`` means "a model call to evaluate"."""
    raw = attrs.raw
    for key in _KIND_KEYS:
        if key in raw:
            operation = flat_text(attrs.get(key)).lower()
            return operation, (None if operation in kinds else "not_llm")
    if "traceloop.span.kind" in raw:  # OpenLLMetry workflow/task/agent/tool spans
        return None, "not_llm"
    for key in _LLM_MARKERS:
        if key in raw:
            return None, None
    return None, "not_genai"


def read_content(span: SpanView) -> Content | None:
    """Content from the first convention the span carries, newest first."""
    if _CONTENT_KEYS.isdisjoint(span.raw) and not span.has_events():
        return None  # the common case in production: content capture is off
    get = span.get
    found = read_semconv(get)
    if found is None or found.empty():
        found = read_semconv_events(span.events())
    if found is None or found.empty():
        found = read_legacy(get)
    if found is None or found.empty():
        found = read_openinference(get, span.raw)
    return None if found is None or found.empty() else found
