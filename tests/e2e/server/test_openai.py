"""The real `mlxd serve` process driven by the official openai client: chat and completions,
streaming and not, usage, stop strings, seeds, logprobs, models, tool calls and reasoning."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.server.conftest import STOP_SCRIPT, THINK_SCRIPT, TRIP_ARGS

USER = [{"role": "user", "content": "What is the capital of France?"}]


def chat_text(client: openai.OpenAI, **kw: object) -> tuple[str, str | None]:
    r = client.chat.completions.create(model="default", messages=USER, **kw)  # type: ignore[arg-type]
    return r.choices[0].message.content or "", r.choices[0].finish_reason


def test_chat_non_stream_has_usage(client: openai.OpenAI, server) -> None:
    r = client.chat.completions.create(model=server.model, messages=USER, max_tokens=8)
    assert r.object == "chat.completion"
    assert r.model == server.model
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage is not None and r.usage.prompt_tokens > 0
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_stream_equals_non_stream_under_greedy(client: openai.OpenAI) -> None:
    text, reason = chat_text(client, max_tokens=12, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="default",
            messages=USER,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == [reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens <= 12


def test_no_usage_chunk_without_stream_options(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(model="default", messages=USER, max_tokens=4, stream=True)
    )
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_max_completion_tokens_bounds_the_answer(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="default", messages=USER, max_completion_tokens=3, extra_body={"ignore_eos": True}
    )
    assert r.usage is not None and r.usage.completion_tokens == 3
    assert r.choices[0].finish_reason == "length"


def test_stop_string_cuts_the_answer(client: openai.OpenAI) -> None:
    full, _ = chat_text(client, max_tokens=24, extra_body={"ignore_eos": True})
    assert len(full) >= 6, full
    stop = full[3:5]
    cut, reason = chat_text(client, max_tokens=24, stop=[stop], extra_body={"ignore_eos": True})
    assert cut == full[: full.index(stop)]
    assert reason == "stop"


def stream_content(client: openai.OpenAI, endpoint: str, **kw: object) -> tuple[list[str], str]:
    """The content deltas of one streamed request (chat or completions), and its one finish
    reason."""
    if endpoint == "chat":
        chunks = list(client.chat.completions.create(messages=USER, stream=True, **kw))  # type: ignore[call-overload]
        texts = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    else:
        chunks = list(client.completions.create(prompt="Well?", stream=True, **kw))  # type: ignore[call-overload]
        texts = [c.choices[0].text for c in chunks if c.choices]
    reasons = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert len(reasons) == 1, reasons
    return [t for t in texts if t], reasons[0]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_streamed_stop_string_across_tokens(client: openai.OpenAI, endpoint: str) -> None:
    """'scripted-stop' says "Yes fine. It is forty-two now!" one token per chunk. A stop
    string spanning three of its tokens cuts the stream just before it: no partial stop
    string leaks, and a false start of it ("s f" in "Yes fine") is not held back for good."""
    full = "".join(STOP_SCRIPT)
    deltas, reason = stream_content(client, endpoint, model="scripted-stop", max_tokens=20)
    assert "".join(deltas) == full and reason == "stop"  # the script, then EOS
    stop = "s forty-t"
    deltas, reason = stream_content(
        client, endpoint, model="scripted-stop", max_tokens=20, stop=["nowhere", stop]
    )
    assert "".join(deltas) == full[: full.index(stop)] == "Yes fine. It i"
    assert reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_stop_string_usage_counts_up_to_the_stop(
    client: openai.OpenAI, endpoint: str, stream: bool
) -> None:
    """The stop "s forty-t" ends inside "-two", the 7th token: usage counts 7 completion
    tokens, not those the engine generated before the cancel landed (ignore_eos: the script
    repeats until max_tokens)."""
    kw: dict[str, Any] = dict(
        model="scripted-stop", max_tokens=200, stop=["s forty-t"], extra_body={"ignore_eos": True}
    )
    if stream:
        kw.update(stream=True, stream_options={"include_usage": True})
    if endpoint == "chat":
        reply = client.chat.completions.create(messages=USER, **kw)
    else:
        reply = client.completions.create(prompt="Well?", **kw)
    usage = list(reply)[-1].usage if stream else reply.usage  # type: ignore[union-attr, arg-type]
    assert usage is not None and usage.completion_tokens == 7


@pytest.mark.parametrize("stream", [False, True])
def test_usage_counts_the_reasoning_tokens(client: openai.OpenAI, stream: bool) -> None:
    """'scripted-think' reasons in 4 tokens between its markers, then answers."""
    kw: dict[str, Any] = dict(model="scripted-think", messages=USER)
    if stream:
        kw.update(stream=True, stream_options={"include_usage": True})
        usage = list(client.chat.completions.create(**kw))[-1].usage
    else:
        usage = client.chat.completions.create(**kw).usage
    assert usage is not None and usage.completion_tokens == len(THINK_SCRIPT) + 1
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 4
    # Cut by max_tokens inside the reasoning: what was generated of it counts.
    cut = client.chat.completions.create(model="scripted-think", messages=USER, max_tokens=3)
    assert cut.usage is not None and cut.usage.completion_tokens_details is not None
    assert cut.usage.completion_tokens_details.reasoning_tokens == 2


def test_same_seed_same_sample(client: openai.OpenAI) -> None:
    kw = dict(max_tokens=16, temperature=1.0, seed=1234, extra_body={"ignore_eos": True})
    first, _ = chat_text(client, **kw)
    second, _ = chat_text(client, **kw)
    assert first == second


def test_chat_logprobs(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="default", messages=USER, max_tokens=5, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content  # type: ignore[union-attr]
    assert r.usage is not None and len(content) == r.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0.0
        assert len(item.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert item.logprob == pytest.approx(max(t.logprob for t in item.top_logprobs))


def test_completions_stream_and_not(client: openai.OpenAI) -> None:
    r = client.completions.create(model="default", prompt="The quick brown", max_tokens=6)
    assert r.object == "text_completion"
    text = r.choices[0].text
    stream = client.completions.create(
        model="default",
        prompt="The quick brown",
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens  # type: ignore[union-attr]


def test_completions_logprobs(client: openai.OpenAI) -> None:
    r = client.completions.create(model="default", prompt="Hello", max_tokens=4, logprobs=2)
    lp = r.choices[0].logprobs
    assert lp is not None and lp.tokens is not None and lp.top_logprobs is not None
    assert len(lp.tokens) == r.usage.completion_tokens  # type: ignore[union-attr]
    assert all(len(top) <= 2 for top in lp.top_logprobs)


def test_models_list_and_get(client: openai.OpenAI, server) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[0] == server.model
    assert "scripted" in ids  # from the store
    assert client.models.retrieve(server.model).id == server.model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_reasoning_and_tool_calls(client: openai.OpenAI) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    r = client.chat.completions.create(model="scripted", messages=USER, tools=tools)
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    extra = msg.model_extra or {}
    assert extra.get("reasoning_content") == "Let me see."
    assert extra.get("reasoning") == "Let me see."
    assert msg.tool_calls and msg.tool_calls[0].function.name == "get_weather"
    assert json.loads(msg.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert msg.tool_calls[0].type == "function" and msg.tool_calls[0].id


def test_tool_calls_streamed_as_deltas(client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    chunks = list(
        client.chat.completions.create(model="scripted", messages=USER, tools=tools, stream=True)
    )
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1
    assert calls[0].index == 0 and calls[0].id and calls[0].type == "function"
    assert calls[0].function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}  # type: ignore[union-attr,arg-type]
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        for c in chunks
        if c.choices
    )
    assert reasoning == "Let me see."
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_streamed_tool_call_arguments_are_the_call(client: openai.OpenAI) -> None:
    """The arguments streamed as tool-call deltas, put together the way the openai client
    does, are the JSON object the model wrote, and the same as without streaming."""
    tools = [{"type": "function", "function": {"name": "plan_trip"}}]
    kw = dict(model="scripted-trip", messages=USER, tools=tools)
    deltas: list[str] = []
    with client.chat.completions.stream(**kw) as stream:  # type: ignore[arg-type]
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                deltas.append(event.arguments_delta)
        final = stream.get_final_completion()
    assert deltas and all(isinstance(d, str) for d in deltas)
    (call,) = final.choices[0].message.tool_calls or []
    assert call.function.name == "plan_trip" and call.id
    assert isinstance(call.function.arguments, str)
    assert "".join(deltas) == call.function.arguments
    assert json.loads(call.function.arguments) == TRIP_ARGS
    assert final.choices[0].finish_reason == "tool_calls"
    assert not final.choices[0].message.content
    whole = client.chat.completions.create(**kw)  # type: ignore[call-overload]
    (plain,) = whole.choices[0].message.tool_calls
    assert json.loads(plain.function.arguments) == TRIP_ARGS


def test_tool_round_trip_and_tool_choice_none(client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    history = USER + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    r = client.chat.completions.create(model="scripted", messages=history, tools=tools)
    assert r.choices[0].message.tool_calls  # the script calls again; the history was accepted
    # tool_choice none: the template sees no tools, so the call is not parsed as one
    r = client.chat.completions.create(
        model="scripted", messages=USER, tools=tools, tool_choice="none"
    )
    assert not r.choices[0].message.tool_calls
    assert "get_weather" in (r.choices[0].message.content or "")


def test_named_tool_choice_must_exist(client: openai.OpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="scripted",
            messages=USER,
            tools=tools,
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    assert "nope" in str(e.value)


def test_non_ascii_round_trip(server) -> None:
    body = {"messages": [{"role": "user", "content": "café 日本語 😀"}], "max_tokens": 4}
    r = httpx.post(server.base_url + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["usage"]["prompt_tokens"] > 0


def test_parity_with_mlxd_run(client: openai.OpenAI, tiny_chat_model: Path, server) -> None:
    """The one-engine contract: same request, greedy, same content from CLI and server."""
    prompt = USER[0]["content"]
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlxd.cli.main",
            "run",
            "-m",
            str(tiny_chat_model),
            "--json",
            "--max-tokens",
            "16",
            prompt,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=server.env,
    )
    assert cli.returncode == 0, cli.stderr
    expected = json.loads(cli.stdout)
    text, reason = chat_text(client, max_tokens=16, temperature=0)
    assert text == expected["content"]
    assert reason == expected["finish_reason"]


def test_default_budget_is_half_the_window(client: openai.OpenAI) -> None:
    """No max_tokens: the server caps the answer at half of tiny-short's 128-token window."""
    r = client.chat.completions.create(
        model="tiny-short", messages=USER, extra_body={"ignore_eos": True}
    )
    assert r.usage is not None and r.usage.prompt_tokens < 64
    assert r.usage.completion_tokens == 64
    assert r.choices[0].finish_reason == "length"


def test_streamed_logprobs_one_per_token(client: openai.OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="default",
            messages=USER,
            max_tokens=6,
            logprobs=True,
            top_logprobs=1,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    items = [
        item
        for c in chunks
        if c.choices and c.choices[0].logprobs is not None
        for item in c.choices[0].logprobs.content or []
    ]
    assert len(items) == chunks[-1].usage.completion_tokens  # type: ignore[union-attr]
    assert all(i.logprob <= 0.0 and len(i.top_logprobs) == 1 for i in items)


def test_allowed_template_kwargs_reach_the_template(client: openai.OpenAI) -> None:
    """enable_thinking=false makes tiny-chat's template close an empty think block, which
    changes the prompt (more prompt tokens)."""
    on = client.chat.completions.create(model="default", messages=USER, max_tokens=1)
    off = client.chat.completions.create(
        model="default",
        messages=USER,
        max_tokens=1,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    assert off.usage.prompt_tokens > on.usage.prompt_tokens  # type: ignore[union-attr]
