"""The real `mlxd serve` process driven by the official anthropic client: /v1/messages
(streaming and not), tool use round trips, thinking blocks, stop sequences, count_tokens,
Anthropic's error shape and x-api-key auth."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.e2e.server.conftest import STOP_SCRIPT, TRIP_ARGS
from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.json_schemas import ANSWER_SCHEMA, ZONE_ARGS

USER: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
TRIP = {"name": "plan_trip", "input_schema": {"type": "object"}}


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def text_of(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def test_create_non_stream(claude: anthropic.Anthropic, server: ServerProcess) -> None:
    m = claude.messages.create(model="default", max_tokens=8, messages=USER)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == server.model
    assert [b.type for b in m.content] == ["text"]
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > 0
    assert 1 <= m.usage.output_tokens <= 8


def test_stream_equals_non_stream_under_greedy(claude: anthropic.Anthropic) -> None:
    kw: dict[str, Any] = dict(
        model="default", max_tokens=12, messages=USER, extra_body={"temperature": 0.0}
    )
    whole = claude.messages.create(**kw)
    events = list(claude.messages.create(**kw, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1] == "content_block_start" and kinds[-3] == "content_block_stop"
    streamed = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert streamed == text_of(whole)
    delta = events[-2]
    assert delta.delta.stop_reason == whole.stop_reason
    assert delta.usage.output_tokens == whole.usage.output_tokens
    with claude.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert text_of(final) == text_of(whole)
    assert final.usage.output_tokens == whole.usage.output_tokens


def test_tool_use_with_thinking(claude: anthropic.Anthropic) -> None:
    """'scripted' thinks, then calls get_weather: a thinking block, then a tool_use block."""
    m = claude.messages.create(model="scripted", max_tokens=64, messages=USER, tools=[WEATHER])
    assert [b.type for b in m.content] == ["thinking", "tool_use"]
    thinking, call = m.content
    assert thinking.thinking == "Let me see."  # type: ignore[union-attr]
    assert call.name == "get_weather" and call.input == {"city": "Paris"}  # type: ignore[union-attr]
    assert call.id  # type: ignore[union-attr]
    assert m.stop_reason == "tool_use"


def test_tool_round_trip(claude: anthropic.Anthropic) -> None:
    """The assistant turn goes back as is (thinking and tool_use blocks), with a tool_result."""
    first = claude.messages.create(model="scripted", max_tokens=64, messages=USER, tools=[WEATHER])
    call = first.content[-1]
    history = [
        *USER,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 C"},  # type: ignore[union-attr]
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    second = claude.messages.create(
        model="scripted", max_tokens=64, messages=history, tools=[WEATHER]
    )
    assert second.stop_reason == "tool_use"  # the script calls again: the history was accepted
    # the second prompt holds the first whole, so it is longer
    total = second.usage.input_tokens + (second.usage.cache_read_input_tokens or 0)
    assert total > first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)


def test_streamed_tool_input_is_the_call(claude: anthropic.Anthropic) -> None:
    """input_json_delta pieces, put together by the SDK, give the object the model wrote."""
    kw: dict[str, Any] = dict(model="scripted-trip", max_tokens=200, messages=USER, tools=[TRIP])
    with claude.messages.stream(**kw) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas and all(d.delta.type == "input_json_delta" for d in deltas)
    (call,) = final.content
    assert call.type == "tool_use" and call.name == "plan_trip"
    assert call.input == TRIP_ARGS
    assert json.loads("".join(d.delta.partial_json for d in deltas)) == TRIP_ARGS  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"
    assert claude.messages.create(**kw).content[0].input == TRIP_ARGS  # type: ignore[union-attr]


def test_tool_choice_none_hides_the_tools(claude: anthropic.Anthropic) -> None:
    m = claude.messages.create(
        model="scripted",
        max_tokens=64,
        messages=USER,
        tools=[WEATHER],
        tool_choice={"type": "none"},
    )
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert "get_weather" in text_of(m) and m.stop_reason == "end_turn"


def test_tool_choice_tool_must_name_a_tool(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="nope"):
        claude.messages.create(
            model="scripted",
            max_tokens=8,
            messages=USER,
            tools=[WEATHER],
            tool_choice={"type": "tool", "name": "nope"},
        )


CLOCK = {
    "name": "get_time",
    "input_schema": ZONE_ARGS,
}


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "get_time"}, {"type": "any"}])
def test_forced_tool_use(claude: anthropic.Anthropic, choice: dict[str, str]) -> None:
    """tiny-chat's free output is gibberish; a forced call is enforced by the grammar all the
    same (thinking off: reasoning is left free)."""
    m = claude.messages.create(
        model="default",
        max_tokens=400,
        messages=USER,
        tools=[WEATHER, CLOCK] if choice["type"] == "tool" else [CLOCK],
        tool_choice=choice,  # type: ignore[arg-type]
        thinking={"type": "disabled"},
    )
    assert m.stop_reason == "tool_use"
    (call,) = m.content
    assert call.type == "tool_use" and call.name == "get_time"
    assert re.fullmatch("[A-Z]{3}", call.input["zone"])  # type: ignore[arg-type]


def test_structured_output(claude: anthropic.Anthropic) -> None:
    m = claude.messages.create(
        model="default",
        max_tokens=400,
        messages=USER,
        thinking={"type": "disabled"},
        output_config={"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}},
    )
    assert m.stop_reason == "end_turn"
    assert isinstance(json.loads(text_of(m))["answer"], int)


def test_thinking_switch_reaches_the_template(claude: anthropic.Anthropic) -> None:
    """thinking disabled: tiny-chat's template closes an empty think block (more tokens)."""
    on = claude.messages.count_tokens(model="default", messages=USER)
    enabled = claude.messages.count_tokens(
        model="default", messages=USER, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    off = claude.messages.count_tokens(
        model="default", messages=USER, thinking={"type": "disabled"}
    )
    assert on.input_tokens == enabled.input_tokens < off.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence(claude: anthropic.Anthropic, stream: bool) -> None:
    """'scripted-stop' says "Yes fine. It is forty-two now!" one token per chunk; a stop
    sequence spanning three tokens cuts it and is named in the answer."""
    full = "".join(STOP_SCRIPT)
    stop = "s forty-t"
    kw: dict[str, Any] = dict(
        model="scripted-stop", max_tokens=20, messages=USER, stop_sequences=["nowhere", stop]
    )
    if stream:
        with claude.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = claude.messages.create(**kw)
    assert text_of(m) == full[: full.index(stop)] == "Yes fine. It i"
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert m.usage.output_tokens == 7  # up to "-two", where the stop sequence ends
    plain = claude.messages.create(model="scripted-stop", max_tokens=20, messages=USER)
    assert text_of(plain) == full and plain.stop_reason == "end_turn"


def test_count_tokens_is_the_prompt(claude: anthropic.Anthropic) -> None:
    kw: dict[str, Any] = dict(model="scripted", messages=USER, system="Be brief.", tools=[WEATHER])
    counted = claude.messages.count_tokens(**kw)
    m = claude.messages.create(max_tokens=4, **kw)
    assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    assert (
        counted.input_tokens
        > claude.messages.count_tokens(model="scripted", messages=USER).input_tokens
    )


def test_system_blocks_equal_system_string(claude: anthropic.Anthropic) -> None:
    as_text = claude.messages.count_tokens(model="default", messages=USER, system="Be brief.")
    as_blocks = claude.messages.count_tokens(
        model="default", messages=USER, system=[{"type": "text", "text": "Be brief."}]
    )
    assert as_text.input_tokens == as_blocks.input_tokens


# ---- errors --------------------------------------------------------------------------

BAD_BLOCK = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "x"}}]}
ORPHAN_RESULT = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}],
    },
]

# (case id, body, status, Anthropic error type)
CASES: list[tuple[str, object, int, str]] = [
    ("missing-max-tokens", {"messages": USER}, 400, "invalid_request_error"),
    ("malformed-json", b'{"messages": [', 400, "invalid_request_error"),
    ("empty-messages", {"messages": [], "max_tokens": 4}, 400, "invalid_request_error"),
    ("image-block", {"messages": [BAD_BLOCK], "max_tokens": 4}, 400, "invalid_request_error"),
    (
        "unknown-block",
        {"messages": [{"role": "user", "content": [{"type": "video"}]}], "max_tokens": 4},
        400,
        "invalid_request_error",
    ),
    (
        "orphan-tool-result",
        {"messages": ORPHAN_RESULT, "max_tokens": 4},
        400,
        "invalid_request_error",
    ),
    (
        "tool-use-from-user",
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                }
            ],
            "max_tokens": 4,
        },
        400,
        "invalid_request_error",
    ),
    (  # a last assistant turn with text is a prefill (test_claude_code); without, a 400
        "ends-in-assistant-tool-use",
        {
            "messages": [
                *USER,
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}],
                },
            ],
            "max_tokens": 4,
        },
        400,
        "invalid_request_error",
    ),
    (
        "temperature-string",
        {"messages": USER, "max_tokens": 4, "temperature": "0.5"},
        400,
        "invalid_request_error",
    ),
    ("max-tokens-zero", {"messages": USER, "max_tokens": 0}, 400, "invalid_request_error"),
    (
        "server-tool",
        {
            "messages": USER,
            "max_tokens": 4,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
        400,
        "invalid_request_error",
    ),
    (
        "budget-over-max-tokens",
        {"messages": USER, "max_tokens": 4, "thinking": {"type": "enabled", "budget_tokens": 8}},
        400,
        "invalid_request_error",
    ),
    (
        "too-many-stops",
        {"messages": USER, "max_tokens": 4, "stop_sequences": [f"s{i}" for i in range(40)]},
        400,
        "invalid_request_error",
    ),
    (
        "unknown-model",
        {"model": "claude-nope", "messages": USER, "max_tokens": 4},
        404,
        "not_found_error",
    ),
    (
        "prompt-over-the-window",
        {"messages": [{"role": "user", "content": "hello " * 3000}], "max_tokens": 4},
        400,
        "invalid_request_error",
    ),
]


def assert_anthropic_error(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body) == {"type", "error"}
    assert body["error"]["type"] == kind
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return str(body["error"]["message"])


@pytest.mark.parametrize(
    ("body", "status", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_gets_anthropic_errors(
    http: httpx.Client, body: object, status: int, kind: str
) -> None:
    path = "/messages"
    r = http.post(path, content=body) if isinstance(body, bytes) else http.post(path, json=body)
    assert_anthropic_error(r, status, kind)
    ok = http.post(path, json={"messages": USER, "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["type"] == "message"


def test_error_messages_name_the_problem(http: httpx.Client) -> None:
    r = http.post("/messages", json={"messages": USER})
    assert "max_tokens" in assert_anthropic_error(r, 400, "invalid_request_error")
    r = http.post("/messages", json={"messages": ORPHAN_RESULT, "max_tokens": 4})
    assert "toolu_x" in assert_anthropic_error(r, 400, "invalid_request_error")
    r = http.post("/messages", json={"messages": [BAD_BLOCK], "max_tokens": 4})
    assert "image" in assert_anthropic_error(r, 400, "invalid_request_error")
    r = http.post("/messages/count_tokens", json={"messages": []})
    assert_anthropic_error(r, 400, "invalid_request_error")
    # other routes keep OpenAI's shape
    assert "error" in http.post("/chat/completions", json={"messages": []}).json()


TOOL_USE = {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}}
TWICE = [
    *USER,
    {"role": "assistant", "content": [TOOL_USE]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "again"}, TOOL_USE]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
]


@pytest.mark.parametrize(
    ("messages", "words"),
    [
        (
            [{"role": "user", "content": []}],
            "messages.0: all messages must have non-empty content except for the optional "
            "final assistant message",
        ),
        (
            [*USER, {"role": "assistant", "content": ""}, *USER],
            "messages.1: all messages must have non-empty content",
        ),
        (TWICE, "messages.3.content.1: `tool_use` ids must be unique"),
    ],
    ids=["empty-user-turn", "empty-assistant-turn", "duplicate-tool-use-id"],
)
def test_turns_anthropic_refuses_are_refused_in_its_words(
    http: httpx.Client, messages: list[dict[str, object]], words: str
) -> None:
    for path in ("/messages", "/messages/count_tokens"):
        r = http.post(path, json={"messages": messages, "max_tokens": 4})
        assert words in assert_anthropic_error(r, 400, "invalid_request_error")


def test_grammar_errors_name_output_config(http: httpx.Client) -> None:
    """The client sent output_config.format; the chat layer's option is response_format."""
    for schema in [{"type": "strin"}, {"$ref": "#"}]:
        fmt = {"format": {"type": "json_schema", "schema": schema}}
        r = http.post("/messages", json={"messages": USER, "max_tokens": 4, "output_config": fmt})
        message = assert_anthropic_error(r, 400, "invalid_request_error")
        assert message.startswith("output_config.format: ") and "response_format" not in message


def test_huge_body_is_request_too_large(http: httpx.Client) -> None:
    big = b'{"max_tokens":4,"messages":[{"role":"user","content":"' + b"a" * (5 << 20) + b'"}]}'
    assert_anthropic_error(http.post("/messages", content=big), 413, "request_too_large")
    assert http.post("/messages", json={"messages": USER, "max_tokens": 2}).status_code == 200


def test_errors_are_typed_in_the_sdk(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-nope", max_tokens=4, messages=USER)
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model="default", max_tokens=4, messages=[])
    assert claude.messages.create(model="default", max_tokens=2, messages=USER).content


# ---- x-api-key -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_chat_model), "--api-key", "s3cret"], server_env(server_home))
    yield srv
    srv.stop()


def test_x_api_key_is_accepted(keyed: ServerProcess) -> None:
    right = anthropic.Anthropic(base_url=keyed.url, api_key="s3cret", max_retries=0)
    assert right.messages.create(model="default", max_tokens=2, messages=USER).content
    wrong = anthropic.Anthropic(base_url=keyed.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="default", max_tokens=2, messages=USER)
    r = httpx.post(keyed.url + "/v1/messages", json={"messages": USER, "max_tokens": 2})
    assert_anthropic_error(r, 401, "authentication_error")
    # x-api-key works on the OpenAI routes too, and Bearer on Anthropic's
    r = httpx.get(keyed.url + "/v1/models", headers={"x-api-key": "s3cret"})
    assert r.status_code == 200
    r = httpx.post(
        keyed.url + "/v1/messages/count_tokens",
        json={"messages": USER},
        headers={"Authorization": "Bearer s3cret"},
    )
    assert r.status_code == 200 and r.json()["input_tokens"] > 0


def test_metrics_count_the_new_routes(http: httpx.Client, server: ServerProcess) -> None:
    from tests.e2e.server.serverproc import metric

    def ttft_count() -> float:
        text = httpx.get(server.url + "/metrics").text
        return metric(text, "mlxd_time_to_first_token_seconds_count")

    before = ttft_count()
    assert http.post("/messages", json={"messages": USER, "max_tokens": 2}).status_code == 200
    assert http.post("/messages/count_tokens", json={"messages": USER}).status_code == 200
    assert http.post("/responses", json={"input": "hi", "max_output_tokens": 2}).status_code == 200
    text = httpx.get(server.url + "/metrics").text
    for route in ("/v1/messages", "/v1/messages/count_tokens", "/v1/responses"):
        assert f'mlxd_http_requests_total{{route="{route}",status="200"}}' in text
    assert ttft_count() >= before + 2  # both generations went through the shared timer


def test_tool_names_follow_anthropics_rule(http: httpx.Client) -> None:
    """Up to 128 of [A-Za-z0-9_-] (long MCP tool names), as Anthropic allows."""
    tool = {"name": "mcp__" + "a" * 120, "input_schema": {"type": "object"}}
    ok = http.post("/messages/count_tokens", json={"messages": USER, "tools": [tool]})
    assert ok.status_code == 200, ok.text
    for bad in ("a" * 129, "dotted.name", "with space"):
        body = {"messages": USER, "tools": [{**tool, "name": bad}]}
        assert_anthropic_error(
            http.post("/messages/count_tokens", json=body), 400, "invalid_request_error"
        )


@pytest.fixture(scope="module")
def aliased(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    """`--alias`: Haiku names go to 'scripted-stop', every other claude-* name to the
    preloaded model (the first matching pattern wins)."""
    args = ["--model", str(tiny_chat_model), "--alias", "claude-haiku-*=scripted-stop"]
    srv = launch([*args, "--alias", "claude-*=default"], server_env(server_home))
    yield srv
    srv.stop()


def test_aliases_serve_claude_names(aliased: ServerProcess) -> None:
    """What Claude Code sends (`claude-sonnet-4-6`, `claude-haiku-4-5`) is served as the
    operator mapped it; a name no pattern matches is still a 404."""
    client = anthropic.Anthropic(base_url=aliased.url, api_key="x", max_retries=0, timeout=120)
    kw: dict[str, Any] = dict(max_tokens=20, messages=USER, extra_body={"temperature": 0.0})
    sonnet = client.messages.create(model="claude-sonnet-4-6", **kw)
    default = client.messages.create(model="default", **kw)
    assert sonnet.model == default.model == aliased.model
    assert text_of(sonnet) == text_of(default)
    haiku = client.messages.create(model="claude-haiku-4-5", **kw)
    assert haiku.model == "scripted-stop" and text_of(haiku) == "".join(STOP_SCRIPT)
    counted = client.messages.count_tokens(model="claude-opus-4-1", messages=USER)
    assert (
        counted.input_tokens
        == client.messages.count_tokens(model="default", messages=USER).input_tokens
    )
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude", **kw)


def test_a_bad_alias_is_refused_at_start(server_home: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "mlxd.cli.main", "serve", "--port", "0", "--alias", "claude-*"],
        env=server_env(server_home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["mlxd: error: --alias 'claude-*': expected NAME=MODEL"]
