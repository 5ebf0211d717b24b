"""End to end on real forward passes: the scripted checkpoint's greedy output goes through the
real engine and the chat layer, and comes out as reasoning, text and tool calls."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mlxd.chat.options import ChatOptions
from mlxd.chat.session import start_chat, start_completion
from mlxd.errors import InvalidRequest
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Warning
from tests.chat_requests import chat_request
from tests.integration.chat.conftest import CALL, SCRIPT, TOOLS

USER = [{"role": "user", "content": "What is the weather in Paris?"}]


def _split(events):
    finishes = [e for e in events if isinstance(e, FinishEvent)]
    assert len(finishes) == 1 and events[-1] is finishes[0]
    return (
        "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
        "".join(e.text for e in events if isinstance(e, TextDelta)),
        [e for e in events if isinstance(e, ToolCall)],
        finishes[0],
    )


@pytest.fixture(scope="module")
def scripted(engine, scripted_model):
    return engine.load_model(scripted_model)


def test_chat_session_reasoning_text_and_tool_call(engine, scripted):
    stream = start_chat(engine, scripted, chat_request(USER, tools=TOOLS))
    assert stream.prompt.prompt_tokens > 0 and "get_weather" in stream.prompt.text
    reasoning, text, calls, finish = _split(list(stream))
    assert reasoning == "Let me see."
    assert text == "The answer is"
    assert [(c.name, json.loads(c.arguments), c.index) for c in calls] == [
        ("get_weather", {"city": "Paris"}, 0)
    ]
    assert calls[0].id.startswith("call_")
    assert finish.reason == FinishReason.TOOL_CALLS
    assert finish.usage.prompt_tokens == stream.prompt.prompt_tokens
    assert finish.usage.completion_tokens == len(SCRIPT) + 1  # the engine counts the EOS
    assert finish.usage.reasoning_tokens == 1  # "Let me see.", between the markers
    assert isinstance(stream.request_id, str) and stream.request_id


def test_chat_session_without_tools_the_call_is_text(engine, scripted):
    reasoning, text, calls, finish = _split(list(start_chat(engine, scripted, chat_request(USER))))
    assert calls == [] and finish.reason == FinishReason.STOP
    assert text.startswith("The answer is<tool_call>{") and text.endswith("</tool_call>")


def test_chat_session_stop_string_across_tokens_cancels(engine, scripted):
    stream = start_chat(engine, scripted, chat_request(USER, {"stop": ["answer is"]}, tools=TOOLS))
    reasoning, text, calls, finish = _split(list(stream))
    assert (reasoning, text, calls) == ("Let me see.", "The ", [])
    assert finish.reason == FinishReason.STOP
    assert finish.usage.completion_tokens == 5  # up to " is", which completed the stop string


@pytest.mark.parametrize("logprobs", [False, True])
def test_chat_session_stop_usage_counts_no_token_past_the_stop(engine, scripted, logprobs):
    """The engine ran to the end before the reader looked (the script, then EOS: 9 tokens,
    read as one merged delta); usage counts the 5 tokens up to the one ending the stop."""
    opts = {"stop": ["answer is"], "logprobs": logprobs}
    stream = start_chat(engine, scripted, chat_request(USER, opts, tools=TOOLS))
    while not stream.handle.finished:
        time.sleep(0.01)
    reasoning, text, calls, finish = _split(list(stream))
    assert (reasoning, text, finish.reason) == ("Let me see.", "The ", FinishReason.STOP)
    assert finish.usage.completion_tokens == 5
    plain = _split(list(start_chat(engine, scripted, chat_request(USER, {"stop": ["nowhere"]}))))
    assert plain[3].usage.completion_tokens == len(SCRIPT) + 1  # no match: the engine's count


@pytest.mark.parametrize("logprobs", [False, True])
def test_chat_session_reasoning_tokens_in_any_delivery(engine, scripted_open_model, logprobs):
    """The reasoning part's tokens are counted whether the reader takes tokens as they come
    or one merged delta after the engine finished, and with logprobs (token by token)."""
    info = engine.load_model(scripted_open_model)
    for wait in (False, True):
        stream = start_chat(engine, info, chat_request(USER, {"logprobs": logprobs}))
        while wait and not stream.handle.finished:
            time.sleep(0.01)
        reasoning, text, _, finish = _split(list(stream))
        assert (reasoning, text) == ("Plan.", "Done.")  # the prompt opened <think>
        assert (finish.usage.reasoning_tokens, finish.usage.completion_tokens) == (1, 4)


def test_chat_session_max_tokens_is_length(engine, scripted):
    events = list(start_chat(engine, scripted, chat_request(USER, {"max_tokens": 2}, tools=TOOLS)))
    reasoning, text, calls, finish = _split(events)
    assert (reasoning, text, finish.reason) == ("Let me see.", "", FinishReason.LENGTH)


def test_chat_session_max_tokens_cut_inside_tool_call_warns(engine, scripted):
    events = list(start_chat(engine, scripted, chat_request(USER, {"max_tokens": 6}, tools=TOOLS)))
    reasoning, text, calls, finish = _split(events)
    assert calls == [] and finish.reason == FinishReason.LENGTH
    assert text == "The answer is<tool_call>"
    assert any(isinstance(e, Warning) and "tool call" in e.message for e in events)


def test_chat_session_prompt_that_opens_reasoning(engine, scripted_open_model):
    info = engine.load_model(scripted_open_model)
    stream = start_chat(engine, info, chat_request(USER))
    assert stream.prompt.reasoning_open
    reasoning, text, calls, finish = _split(list(stream))
    assert (reasoning, text, finish.reason) == ("Plan.", "Done.", FinishReason.STOP)


def test_chat_session_async_equals_sync(engine, scripted):
    # A slow reader gets merged token deltas, so event boundaries may differ between runs:
    # compare the joined reasoning, text, tool calls and per-token logprobs instead.
    def joined(events):
        reasoning, text, tools, finish = _split(events)
        calls = [(t.name, t.arguments, t.index) for t in tools]
        lps = [lp for e in events if isinstance(e, TextDelta) for lp in e.logprobs]
        return reasoning, text, calls, finish.reason, lps

    sync = list(start_chat(engine, scripted, chat_request(USER, {"logprobs": True}, tools=TOOLS)))

    async def collect():
        stream = start_chat(engine, scripted, chat_request(USER, {"logprobs": True}, tools=TOOLS))
        return [e async for e in stream]

    async_events = asyncio.run(collect())
    assert joined(async_events) == joined(sync)
    assert joined(sync)[3] == FinishReason.TOOL_CALLS
    text_lps = joined(sync)[4]
    assert text_lps and all(lp.logprob <= 0 for lp in text_lps)


def test_chat_session_cancel_ends_with_cancelled(engine, scripted):
    # ignore_eos: the script repeats forever, so only cancel() can end it.
    opts = {"ignore_eos": True, "max_tokens": 100000}
    stream = start_chat(engine, scripted, chat_request(USER, opts, tools=TOOLS))
    events = []
    for event in stream:
        events.append(event)
        if len(events) == 1:
            stream.cancel()
    assert isinstance(events[-1], FinishEvent) and events[-1].reason == FinishReason.CANCELLED
    assert events[-1].usage.completion_tokens < 100000


def test_chat_session_completion_raw_text(engine, scripted):
    stream = start_completion(engine, scripted, "Hello", ChatOptions.parse({"stop": "answer"}))
    assert stream.prompt.token_ids == scripted.tokenizer.encode("Hello")
    events = list(stream)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "<think>Let me see.</think>The "
    )
    assert events[-1].reason == FinishReason.STOP


def test_chat_session_bad_options_fail_before_submit(engine, scripted):
    with pytest.raises(InvalidRequest) as info:
        start_chat(engine, scripted, chat_request(USER, {"temperature": float("nan")}))
    assert info.value.param == "temperature"
    with pytest.raises(InvalidRequest) as info:
        start_chat(engine, scripted, chat_request([{"role": "nobody"}]))
    assert info.value.param == "messages[0].role"


def test_chat_session_harmony_channels_and_function_call(engine, scripted_harmony_model):
    info = engine.load_model(scripted_harmony_model)
    reasoning, text, calls, finish = _split(
        list(start_chat(engine, info, chat_request(USER, tools=TOOLS)))
    )
    assert (reasoning, text) == ("Need the weather.", "")
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert finish.reason == FinishReason.TOOL_CALLS


def test_chat_session_custom_markers_and_no_split(engine, scripted_open_model, scripted):
    info = engine.load_model(scripted_open_model)
    explicit = start_chat(engine, info, chat_request(USER, reasoning=("<think>", "</think>")))
    assert _split(list(explicit))[:2] == ("Plan.", "Done.")
    plain = start_chat(engine, info, chat_request(USER, reasoning=None))
    assert _split(list(plain))[:2] == ("", "Plan.</think>Done.")
    custom = start_chat(engine, scripted, chat_request(USER, reasoning=("Let me see.", " is")))
    assert _split(list(custom))[:2] == (
        "</think>The answer",
        "<think><tool_call>" + CALL + "</tool_call>",
    )
