"""Span shapes of real instrumentations (Anthropic, google-genai, Azure, Strands, Phoenix...)
that the GenAI readers must map to the right roles, input and output."""

from __future__ import annotations

import json
from typing import Any

import orjson

from evalstream.config import InputTopic
from evalstream.formats import otlp_json
from evalstream.formats.base import Decoded
from evalstream.formats.genai import Options

TRACE = "0af7651916cd43dd8448eb211c80319c"


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int) and not isinstance(value, bool):
        return {"key": key, "value": {"intValue": str(value)}}
    if not isinstance(value, str):
        value = json.dumps(value)
    return {"key": key, "value": {"stringValue": value}}


def ev(name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "timeUnixNano": "1500",
            "attributes": [kv(k, v) for k, v in attrs.items()]}


def span(span_id: str, attrs: dict[str, Any], *, end: int = 2_000, parent: str | None = None,
         events: list[dict[str, Any]] | None = None,
         status: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": TRACE, "spanId": span_id, "name": "s", "startTimeUnixNano": "1000",
        "endTimeUnixNano": str(end), "attributes": [kv(k, v) for k, v in attrs.items()],
        "events": events or []}
    if parent:
        out["parentSpanId"] = parent
    if status is not None:
        out["status"] = status
    return out


def decode(*spans: dict[str, Any], resource: dict[str, Any] | None = None) -> Decoded:
    res = [kv(k, v) for k, v in (resource or {"service.name": "app"}).items()]
    doc = {"resourceSpans": [{"resource": {"attributes": res},
                              "scopeSpans": [{"spans": list(spans)}]}]}
    options = Options.from_topic(InputTopic(topic="t", format="otlp_json"))
    return otlp_json.decode(orjson.dumps(doc), options)


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


ANSWER = [{"role": "assistant", "parts": [{"type": "text", "content": "18C, cloudy."}],
           "finish_reason": "stop"}]


# --- 1. tool results sent back in "user" messages ------------------------------------------


def test_tool_results_in_user_messages_are_tool_turns_not_the_question() -> None:
    # google-genai / Anthropic keep the provider's role: the tool result is a "user" message.
    inputs = [text("user", "Weather in Paris?"),
              {"role": "model", "parts": [{"type": "text", "content": "Let me check."},
                                          {"type": "tool_call", "id": "c1", "name": "w"}]},
              {"role": "user", "parts": [{"type": "tool_call_response", "id": "c1",
                                          "response": {"temp_c": 18}}]},
              {"role": "", "parts": [{"type": "tool_call_response", "id": "c2",
                                      "response": "cloudy"}]}]
    decoded = decode(span("1000000000000001", {
        "gen_ai.operation.name": "generate_content", "gen_ai.input.messages": inputs,
        "gen_ai.output.messages": ANSWER}))
    event = decoded.events[0]
    assert event.input == "Weather in Paris?"
    assert [(m.role, m.content) for m in event.messages] == [
        ("user", "Weather in Paris?"), ("assistant", "Let me check."),
        ("tool", '{"temp_c":18}'), ("tool", "cloudy")]


def test_text_beside_tool_results_is_still_the_user_asking() -> None:
    inputs = [text("user", "Weather?"),
              {"role": "user", "parts": [{"type": "tool_call_response", "response": "18C"},
                                         {"type": "text", "content": "And tomorrow?"}]}]
    event = decode(span("1000000000000002", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": inputs,
        "gen_ai.output.messages": ANSWER})).events[0]
    assert event.input == "And tomorrow?"
    assert [m.role for m in event.messages] == ["user", "tool", "user"]


def test_gemini_model_role_is_assistant_in_flattened_prompts() -> None:
    event = decode(span("1000000000000003", {
        "llm.request.type": "chat", "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "hi", "gen_ai.prompt.1.role": "model",
        "gen_ai.prompt.1.content": "hello", "gen_ai.prompt.2.role": "user",
        "gen_ai.prompt.2.content": "how are you?", "gen_ai.completion.0.content": "fine"},
    )).events[0]
    assert [m.role for m in event.messages] == ["user", "assistant", "user"]
    assert event.input == "how are you?"


# --- 2. OpenInference raw bodies -------------------------------------------------------------


def oi_span(span_id: str, attrs: dict[str, Any]) -> dict[str, Any]:
    json_bodies = {f"{k.split('.')[0]}.mime_type": "application/json"
                   for k, v in attrs.items() if k.endswith(".value") and not isinstance(v, str)}
    return span(span_id, {"openinference.span.kind": "LLM", **attrs, **json_bodies})


def test_openinference_bodies_of_known_apis_are_unwrapped() -> None:
    responses = {"object": "response", "output": [
        {"type": "reasoning", "summary": []},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Paris is 18C."}]}]}
    anthropic = {"type": "message", "role": "assistant", "content": [
        {"type": "text", "text": "Checking."}, {"type": "tool_use", "name": "w", "input": {}}]}
    decoded = decode(
        oi_span("1000000000000011", {"input.value": {"input": "Weather?", "model": "gpt-4.1"},
                                     "output.value": responses}),
        oi_span("1000000000000012", {"input.value": {"prompt": ["Say hi"]},
                                     "output.value": {"choices": [{"text": "hi!"}]}}),
        oi_span("1000000000000013", {
            "input.value": {"messages": [{"role": "user", "content": [
                {"type": "text", "text": "Weather?"}]}]},
            "output.value": anthropic}),
        oi_span("1000000000000014", {"input.value": "plain question",
                                     "output.value": {"generations": [[{"text": "gen"}]]}}),
    )
    assert [(e.input, e.output) for e in decoded.events] == [
        ("Weather?", "Paris is 18C."), ("Say hi", "hi!"), ("Weather?", "Checking."),
        ("plain question", "gen")]


def test_openinference_tool_call_replies_have_no_output_rather_than_json() -> None:
    tool_use = {"type": "message", "role": "assistant",
                "content": [{"type": "tool_use", "name": "w", "input": {"city": "Paris"}}]}
    llm_result = {"generations": [[{"text": "", "type": "ChatGeneration"}]],
                  "type": "LLMResult"}
    decoded = decode(
        # Output messages listed (a tool call, no text): the body is not read at all.
        oi_span("1000000000000021", {
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "Weather?",
            "llm.output_messages.0.message.role": "assistant",
            "output.value": {"choices": [{"message": {"content": "from body"}}]}}),
        oi_span("1000000000000022", {"input.value": "Weather?", "output.value": tool_use}),
        oi_span("1000000000000023", {"input.value": "Weather?", "output.value": llm_result}),
        oi_span("1000000000000024", {"input.value": {"unknown": 1},
                                     "output.value": {"unknown": 2}}),
    )
    assert [(e.input, e.output) for e in decoded.events] == [("Weather?", None)] * 3
    assert decoded.skipped == {"no_content": 1}


# --- 3. per-message span events (semconv 1.28-1.36) ---------------------------------------


def test_azure_message_events_with_json_bodies() -> None:
    events = [
        ev("gen_ai.system.message", {"gen_ai.event.content": {"role": "system",
                                                              "content": "be terse"}}),
        ev("gen_ai.user.message", {"gen_ai.event.content": {"role": "user",
                                                            "content": "capital?"}}),
        ev("gen_ai.assistant.message", {"gen_ai.event.content": {"content": "Of what?"}}),
        ev("gen_ai.tool.message", {"gen_ai.event.content": {"content": "42", "id": "c"}}),
        ev("gen_ai.user.message", {"gen_ai.event.content": {"content": "France"}}),
        ev("gen_ai.choice", {"gen_ai.event.content": {
            "finish_reason": "stop", "index": 0, "message": {"content": "Paris"}}}),
    ]
    event = decode(span("1000000000000031", {"gen_ai.operation.name": "chat",
                                             "gen_ai.system": "az.ai.inference"},
                        events=events)).events[0]
    assert (event.system_prompt, event.input, event.output) == ("be terse", "France", "Paris")
    assert [m.role for m in event.messages] == ["user", "assistant", "tool", "user"]
    assert event.attributes["finish_reasons"] == "stop"


def test_strands_message_events_with_content_blocks() -> None:
    events = [ev("gen_ai.user.message", {"content": [{"text": "Weather in Paris?"}]}),
              ev("gen_ai.user.message", {"content": "[not json"}),
              ev("gen_ai.choice", {"finish_reason": "end_turn",
                                   "message": [{"text": "18C."}, {"toolUse": {"name": "w"}}]})]
    event = decode(span("1000000000000032", {"gen_ai.operation.name": "chat"},
                        events=events)).events[0]
    assert (event.input, event.output) == ("[not json", "18C.")
    assert event.messages[0].content == "Weather in Paris?"
    flat = decode(span("1000000000000033", {"gen_ai.operation.name": "chat"}, events=[
        ev("gen_ai.user.message", {"content": "capital?"}),
        ev("gen_ai.choice", {"index": 0, "message": {"content": "Paris"}})])).events[0]
    assert (flat.input, flat.output) == ("capital?", "Paris")


# --- 4. operation details split over several events ----------------------------------------

DETAILS = "gen_ai.client.inference.operation.details"


def test_strands_operation_details_split_over_events_are_merged() -> None:
    events = [ev(DETAILS, {"gen_ai.system_instructions": [{"type": "text",
                                                           "content": "Weather bot."}]}),
              ev(DETAILS, {"gen_ai.input.messages": [text("user", "Weather in Paris?")]}),
              ev(DETAILS, {"gen_ai.output.messages": ANSWER})]
    event = decode(span("1000000000000041", {"gen_ai.operation.name": "chat"},
                        events=events)).events[0]
    assert (event.system_prompt, event.input, event.output) == (
        "Weather bot.", "Weather in Paris?", "18C, cloudy.")


# --- 5. OpenLLMetry completion-style prompts ------------------------------------------------


def test_openllmetry_completion_prompt_user_key_is_the_question() -> None:
    decoded = decode(
        span("1000000000000051", {"gen_ai.system": "AWS", "llm.request.type": "completion",
                                   "gen_ai.prompt.0.user": "Translate: hello",
                                   "gen_ai.completion.0.content": "hola"}),
        # Content only under .user: still read (it is a content key, not "capture off").
        span("1000000000000052", {"gen_ai.prompt.0.user": "Say hi"}),
    )
    assert [(e.input, e.output) for e in decoded.events] == [
        ("Translate: hello", "hola"), ("Say hi", None)]
    assert [m.role for m in decoded.events[0].messages] == ["user"]


# --- 6. failed calls --------------------------------------------------------------------------


def test_failed_spans_are_skipped_as_error_spans() -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.input.messages": [text("user", "Q?")],
             "gen_ai.output.messages": [text("assistant", "The partial ans")]}
    decoded = decode(span("1000000000000061", attrs, status={"code": 2, "message": "timeout"}),
                     span("1000000000000062", attrs, status={"code": "STATUS_CODE_ERROR"}),
                     span("1000000000000063", attrs, status={"code": 1}),
                     span("1000000000000064", attrs, status={}))
    assert [e.span_id for e in decoded.events] == ["1000000000000063", "1000000000000064"]
    assert decoded.skipped == {"error_span": 2}
    # Failed tool spans stay what they are: not model calls.
    tool = span("1000000000000065", {"gen_ai.operation.name": "execute_tool"},
                status={"code": 2})
    assert decode(tool).skipped == {"not_llm": 1}


# --- 7. one model call seen by two instrumentations ------------------------------------------


def oi_chat(span_id: str, question: str, answer: str, parent: str | None = None,
            end: int = 2_000) -> dict[str, Any]:
    return span(span_id, {"openinference.span.kind": "LLM",
                          "llm.input_messages.0.message.role": "user",
                          "llm.input_messages.0.message.content": question,
                          "llm.output_messages.0.message.role": "assistant",
                          "llm.output_messages.0.message.content": answer},
                parent=parent, end=end)


def test_framework_span_around_the_same_provider_call_is_a_duplicate() -> None:
    langchain, openai = "100000000000007a", "100000000000007B"
    decoded = decode(
        oi_chat(langchain, "hi", "hello", end=3_000),  # LangChain LLM span (parent)
        oi_chat(openai, "hi", "hello", parent=langchain),  # OpenAI SDK span (child)
        # A parent whose child is another call (different answer) is kept.
        oi_chat("1000000000000071", "plan", "call the tool", end=3_000),
        oi_chat("1000000000000072", "hi", "other", parent="1000000000000071"),
    )
    assert [e.span_id for e in decoded.events] == [
        "100000000000007b", "1000000000000071", "1000000000000072"]
    assert decoded.skipped == {"duplicate_span": 1}


# --- 8. Phoenix project names -------------------------------------------------------------


def test_phoenix_project_name_stands_in_for_a_default_service_name() -> None:
    def app_of(resource: dict[str, Any]) -> str | None:
        return decode(oi_chat("1000000000000081", "hi", "hello"),
                      resource=resource).events[0].app

    project = {"openinference.project.name": "billing-bot"}
    assert app_of({"service.name": "unknown_service:python", **project}) == "billing-bot"
    assert app_of(project) == "billing-bot"
    assert app_of({"service.name": "svc", **project}) == "svc"
    assert app_of({"service.name": "unknown_service"}) == "unknown_service"


# --- 9. OpenInference message lists with gaps -------------------------------------------------


def test_openinference_messages_are_read_past_gaps_in_their_numbering() -> None:
    # The Responses API reader numbers input from 1 and skips items it does not map (see
    # test_formats_otlp_captured); keys naming no field, or no number, list no message.
    decoded = decode(span("1000000000000091", {
        "openinference.span.kind": "LLM",
        "input.value": '{"input": [{"role": "user", "content": "Second?"}]}',
        "input.mime_type": "application/json",
        "llm.input_messages.1.message.role": "system",
        "llm.input_messages.1.message.content": "Be brief.",
        "llm.input_messages.2.message.role": "user",
        "llm.input_messages.2.message.content": "First?",
        "llm.input_messages.5.message.role": "user",
        "llm.input_messages.5.message.contents.0.message_content.type": "text",
        "llm.input_messages.5.message.contents.0.message_content.text": "Second?",
        "llm.input_messages.12": "no field",
        "llm.input_messages.x.message.role": "user",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "Yes.",
    }))
    [event] = decoded.events
    assert event.system_prompt == "Be brief."
    assert [(m.role, m.content) for m in event.messages] == [
        ("user", "First?"), ("user", "Second?")]
    assert (event.input, event.output) == ("Second?", "Yes.")


def test_an_openinference_index_too_long_for_int_lists_no_message() -> None:
    # int() refuses a decimal string past 4,300 digits (ValueError): one such key dropped
    # the whole span as bad_span, its question and answer with it. An index that long
    # names no message, and a non-ASCII digit none OpenInference writes.
    decoded = decode(span("1000000000000092", {
        "openinference.span.kind": "LLM",
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Frost tonight?",
        "llm.input_messages." + "9" * 5_000 + ".message.content": "junk",
        "llm.input_messages.\u0663.message.content": "junk",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "No.",
    }))
    [event] = decoded.events
    assert (event.input, event.output) == ("Frost tonight?", "No.")
    assert [(m.role, m.content) for m in event.messages] == [("user", "Frost tonight?")]


def test_an_openinference_index_with_neither_role_nor_text_lists_no_message() -> None:
    # Only a tool call's fields under an index: counted as an empty user message, it kept
    # input.value from standing in, and the event had no question.
    decoded = decode(span("1000000000000093", {
        "openinference.span.kind": "LLM",
        "input.value": "Frost tonight?",
        "llm.input_messages.0.message.tool_calls.0.tool_call.function.name": "forecast",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "No.",
    }))
    [event] = decoded.events
    assert (event.input, event.output) == ("Frost tonight?", "No.")


def test_roles_are_read_case_blind_and_langchain_names_are_the_two_sides() -> None:
    # "User" or LangChain's "human" was taken for a third party: not the question asked.
    inputs = [text("System", "Be brief."), text("HUMAN", "Rain?"), text("ai", "No."),
              text("User", "Snow?")]
    event = decode(span("1000000000000094", {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": inputs,
        "gen_ai.output.messages": ANSWER})).events[0]
    assert event.system_prompt == "Be brief."
    assert [m.role for m in event.messages] == ["user", "assistant", "user"]
    assert event.input == "Snow?"
