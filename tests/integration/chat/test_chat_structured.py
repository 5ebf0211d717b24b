"""Structured output through the chat layer on scripted checkpoints (known greedy output): the
reasoning block stays as the model writes it, only the answer after it is constrained."""

from __future__ import annotations

import json

import pytest

from mlxd.chat.session import start_chat
from mlxd.errors import InvalidRequest
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Warning
from tests.chat_requests import chat_request
from tests.integration.chat.conftest import TOOLS
from tests.integration.chat.scripted import make_scripted_checkpoint
from tests.json_schemas import check

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 6}, "ok": {"type": "boolean"}},
    "required": ["city", "ok"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}}


def split(events):
    assert isinstance(events[-1], FinishEvent)
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    return reasoning, text, [e for e in events if isinstance(e, ToolCall)], events[-1]


def test_reasoning_the_prompt_opened_is_free_then_the_answer_is_constrained(
    engine, scripted_open_model
):
    info = engine.load_model(scripted_open_model)  # the prompt ends in "<think>"
    events = list(start_chat(engine, info, chat_request(USER, {"response_format": FORMAT})))
    reasoning, text, _, finish = split(events)
    assert reasoning == "Plan."  # as scripted: the reasoning is not constrained
    assert text != "Done." and finish.reason == FinishReason.STOP
    check(json.loads(text), SCHEMA)


def test_reasoning_the_model_opens_is_free_then_the_answer_is_constrained(engine, scripted_model):
    info = engine.load_model(scripted_model)  # its script starts with "<think>"
    events = list(start_chat(engine, info, chat_request(USER, {"response_format": FORMAT})))
    reasoning, text, _, finish = split(events)
    assert reasoning == "Let me see." and finish.reason == FinishReason.STOP
    check(json.loads(text), SCHEMA)


def test_a_prompt_that_closed_reasoning_is_constrained_from_the_first_token(engine, scripted_model):
    info = engine.load_model(scripted_model)
    stream = start_chat(
        engine,
        info,
        chat_request(USER, {"response_format": FORMAT}, template_kwargs={"enable_thinking": False}),
    )
    reasoning, text, _, finish = split(list(stream))
    assert reasoning == "" and finish.reason == FinishReason.STOP
    check(json.loads(text), SCHEMA)


def test_forced_call_after_reasoning_in_the_hermes_format(engine, scripted_model):
    info = engine.load_model(scripted_model)
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": SCHEMA}}]
    choice = {"type": "function", "function": {"name": "get_weather"}}
    stream = start_chat(engine, info, chat_request(USER, tools=tools, tool_choice=choice))
    reasoning, text, calls, finish = split(list(stream))
    assert reasoning == "Let me see." and text == ""
    assert [c.name for c in calls] == ["get_weather"]
    check(json.loads(calls[0].arguments), SCHEMA)
    assert finish.reason == FinishReason.TOOL_CALLS


def test_forced_call_in_harmony_is_enforced(engine, scripted_harmony_model):
    # The grammar writes the call on the commentary channel at once (no analysis before it).
    info = engine.load_model(scripted_harmony_model)
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": SCHEMA}}]
    stream = start_chat(engine, info, chat_request(USER, tools=tools, tool_choice="required"))
    events = list(stream)
    assert not [e for e in events if isinstance(e, Warning)]
    reasoning, text, calls, finish = split(events)
    assert [c.name for c in calls] == ["get_weather"] and text == ""
    check(json.loads(calls[0].arguments), SCHEMA)
    assert finish.reason == FinishReason.TOOL_CALLS


def test_response_format_on_a_harmony_model_is_refused(engine, scripted_harmony_model):
    info = engine.load_model(scripted_harmony_model)
    with pytest.raises(InvalidRequest) as err:
        start_chat(engine, info, chat_request(USER, {"response_format": FORMAT}))
    assert err.value.param == "response_format" and "harmony" in err.value.message


def test_a_forced_call_on_a_model_without_a_tool_format_is_generic_json(engine, tiny_plain_model):
    """No tool-call format (random weights, a template without tools): the tools and the
    generic JSON shape are in the system prompt and the grammar makes the answer that call."""
    info = engine.load_model(tiny_plain_model)
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": SCHEMA}}]
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        request = chat_request(USER, {"max_tokens": 200}, tools=tools, tool_choice=choice)
        stream = start_chat(engine, info, request)
        assert "get_weather" in stream.prompt.text and '"arguments"' in stream.prompt.text
        reasoning, text, calls, finish = split(list(stream))
        assert text == "" and [c.name for c in calls] == ["get_weather"]
        check(json.loads(calls[0].arguments), SCHEMA)
        assert finish.reason == FinishReason.TOOL_CALLS


def test_a_forced_call_comes_even_when_the_model_would_end_inside_its_reasoning(
    engine, checkpoints_dir
):
    """The model's script thinks and then ends the turn (EOS) inside the open reasoning
    block: under a forced call EOS closes the reasoning instead, and the call follows."""
    model = make_scripted_checkpoint(checkpoints_dir / "scripted-early-end", ["<think>", "Hmm."])
    info = engine.load_model(model)
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "parameters": SCHEMA}}]
    request = chat_request(USER, {"max_tokens": 200}, tools=tools, tool_choice="required")
    reasoning, text, calls, finish = split(list(start_chat(engine, info, request)))
    assert reasoning == "Hmm." and text == ""
    assert [c.name for c in calls] == ["get_weather"]
    check(json.loads(calls[0].arguments), SCHEMA)
    assert finish.reason == FinishReason.TOOL_CALLS
