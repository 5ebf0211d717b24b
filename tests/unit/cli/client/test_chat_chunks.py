"""`mlxd run/chat --server`: the server's SSE chunks back into the chat events the in-process
engine gives (the real ChatWire makes the frames), OpenAI-style piecewise tool calls, error
frames and cut streams; the request body through the server's own schema; --server URLs."""

from __future__ import annotations

import argparse
import json

import pytest

from mlxd.chat.chat_request import ChatRequest
from mlxd.chat.options import OPTIONS, ChatOptions
from mlxd.chat.tool_choice import ToolChoice
from mlxd.cli.client.chat_chunks import ChunkDecoder
from mlxd.cli.client.http_model import ServerAddress, request_body, server_address
from mlxd.cli.client.model_client import server_of
from mlxd.errors import (
    AuthError,
    ContextOverflow,
    EngineBusy,
    EngineFault,
    EngineUnavailable,
    InvalidRequest,
    ModelNotFound,
    from_http,
)
from mlxd.server.openai.schemas import ChatCompletionRequest
from mlxd.server.openai.wire import ChatWire
from mlxd.types import (
    ChatEvent,
    FinishEvent,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
    Warning,
)

EVENTS: list[ChatEvent] = [
    Warning("not sent on the wire"),
    ReasoningDelta("let me "),
    ReasoningDelta("think"),
    TextDelta("Hello"),
    TextDelta(", wörld 😀\u2028"),
    ToolCall("call_a", "get_weather", '{"city": "Paris"}', index=0),
    ToolCall("call_b", "get_time", "{}", index=1),
    FinishEvent(FinishReason.TOOL_CALLS, Usage(7, 5, 3, reasoning_tokens=2)),
]


def wire_lines(events: list[ChatEvent], error: Exception | None = None) -> list[str]:
    """The body `mlxd serve` sends for these events, as lines."""
    wire = ChatWire(model="tiny", include_usage=True)
    frames = wire.opening()
    for ev in events:
        frames += wire.frames(ev)
    frames += wire.closing() if error is None else wire.error_frames(error)  # type: ignore[arg-type]
    return b"".join(frames).decode().split("\n")


def decode(lines: list[str]) -> tuple[list[ChatEvent], ChunkDecoder]:
    decoder = ChunkDecoder()
    events: list[ChatEvent] = []
    for line in lines:
        events += decoder.feed(line)
    return events + decoder.close(), decoder


def test_the_wire_decodes_to_the_events_it_was_made_of() -> None:
    events, decoder = decode(wire_lines(EVENTS))
    assert events == [e for e in EVENTS if not isinstance(e, Warning)]
    assert decoder.model == "tiny" and decoder.finished


def test_crlf_comments_other_fields_and_multiline_data() -> None:
    lines = [": keep-alive", "", "event: message\r", 'data: {"choices": [{"delta":\r']
    lines += ['data:{"content": "a\\nb"}}]}', "\r", "data: [DONE]", ""]
    events, _ = decode(lines)
    assert events == [TextDelta("a\nb"), FinishEvent(FinishReason.STOP, Usage())]


def test_openai_style_tool_calls_arrive_in_pieces() -> None:
    def chunk(delta: dict, finish: str | None = None) -> list[str]:
        body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return ["data: " + json.dumps(body), ""]

    def part(index: int, **fields: object) -> dict:
        return {"tool_calls": [{"index": index, **fields}]}

    lines = chunk({"content": "Sure."})
    lines += chunk(part(0, id="c1", function={"name": "get_", "arguments": ""}))
    lines += chunk(part(0, function={"name": "weather", "arguments": '{"city": '}))
    lines += chunk(part(0, function={"arguments": '"Paris"}'}))
    lines += chunk(part(1, id="c2", function={"name": "now", "arguments": "{}"}))
    lines += chunk({}, "tool_calls") + ["data: [DONE]", ""]
    events, _ = decode(lines)
    assert events == [
        TextDelta("Sure."),
        ToolCall("c1", "get_weather", '{"city": "Paris"}', 0),
        ToolCall("c2", "now", "{}", 1),
        FinishEvent(FinishReason.TOOL_CALLS, Usage()),
    ]


def test_an_error_frame_ends_the_stream_with_its_code() -> None:
    events, decoder = decode(wire_lines(EVENTS[3:4], ContextOverflow("too long")))
    assert events[0] == TextDelta("Hello")
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.ERROR
    assert (finish.error, finish.error_code) == ("too long", ContextOverflow.code)
    assert decoder.feed("data: [DONE]") == [] and decoder.feed("") == []  # once only


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        (['data: {"choices": [{"delta": {"content": "cut"}}]}', ""], EngineUnavailable.code),
        (["data: {not json", ""], EngineFault.code),
        (["data: [1, 2]", ""], EngineFault.code),
    ],
    ids=["no-done", "not-json", "not-an-object"],
)
def test_a_broken_stream_is_an_error_finish(lines: list[str], code: str) -> None:
    events, _ = decode(lines)
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is FinishReason.ERROR
    assert finish.error_code == code and finish.error


def test_every_option_is_sent_as_the_server_field_of_its_name() -> None:
    """The request body parses with the server's own schema back into the same options."""
    options: dict[str, object] = {
        "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "repetition_penalty": 1.1, "repetition_context_size": 32, "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "seed": 7, "max_tokens": 12, "logit_bias": {"17": -5.0},
        "logprobs": True, "top_logprobs": 2, "ignore_eos": True, "stop": ["END", "\n\n"],
        "draft_kind": "ngram", "num_draft_tokens": 3,
        "response_format": {"type": "json_object"},
        "repeat_last_n": 32, "dry_multiplier": 0.8, "dry_base": 1.5, "dry_allowed_length": 3,
        "dry_penalty_last_n": 256, "dry_sequence_breakers": ["\n", "|"],
        "xtc_probability": 0.5, "xtc_threshold": 0.2, "loop_repeats": 4,
        "max_reasoning_tokens": 64,
    }  # fmt: skip
    assert set(options) == set(OPTIONS)  # a new option must be added here, and to the wire
    messages = [{"role": "user", "content": "hi"}]
    request = ChatRequest(
        messages, ChatOptions.parse(options), template_kwargs={"enable_thinking": False}
    )
    body = request_body("m", request)
    req = ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    expected = options | {"logit_bias": {17: -5.0}}
    assert req.options() == expected
    assert req.stream and req.include_usage and req.model == "m"
    assert req.chat_template_kwargs == {"enable_thinking": False}
    assert "tool_choice" not in body  # auto, the default, is not sent


def test_tools_and_a_tool_choice_are_sent_as_openai_spells_them() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    for choice in ("none", "required", {"type": "function", "function": {"name": "f"}}):
        request = ChatRequest(
            [{"role": "user", "content": "hi"}], tools=tools, tool_choice=ToolChoice.parse(choice)
        )
        body = request_body("m", request)
        assert body["tools"] == tools and body["tool_choice"] == choice
        ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:8080", ServerAddress("http", "127.0.0.1", 8080)),
        ("http://127.0.0.1:8080/v1/", ServerAddress("http", "127.0.0.1", 8080)),
        (" localhost:9000 ", ServerAddress("http", "localhost", 9000)),
        ("localhost", ServerAddress("http", "localhost", 8080)),
        ("http://box", ServerAddress("http", "box", 80)),
        ("https://box/mlxd/v1", ServerAddress("https", "box", 443, "/mlxd")),
        ("http://[::1]:81", ServerAddress("http", "::1", 81)),
    ],
)
def test_server_urls(url: str, address: ServerAddress) -> None:
    assert server_address(url) == address
    assert server_address(address.url) == address


@pytest.mark.parametrize("url", ["ftp://box", "http://", "http://box:port"])
def test_bad_server_urls(url: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        server_address(url)
    assert e.value.param == "server"


def test_server_side_flags_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_SERVER", "localhost:1")
    args = argparse.Namespace(server=None, local=False, draft_model=None, trust_remote_code=False)
    assert server_of(args) == ServerAddress("http", "localhost", 1)
    assert server_of(argparse.Namespace(**vars(args) | {"local": True})) is None
    assert server_of(argparse.Namespace(**vars(args) | {"server": ""})) is None
    with pytest.raises(InvalidRequest, match="--draft-model is the server's choice"):
        server_of(argparse.Namespace(**vars(args) | {"draft_model": "small"}))


def test_http_errors_keep_their_class() -> None:
    assert type(from_http(400, "context_length_exceeded", "x")) is ContextOverflow
    assert type(from_http(401, None, "x")) is AuthError
    assert type(from_http(403, "host_not_allowed", "x")) is AuthError
    assert type(from_http(404, "model_not_found", "x")) is ModelNotFound
    assert type(from_http(413, "payload_too_large", "x")) is InvalidRequest
    assert type(from_http(429, None, "x")) is EngineBusy
    assert type(from_http(503, None, "x")) is EngineUnavailable
    assert type(from_http(500, None, "x")) is EngineFault
    assert type(from_http(502, None, "bad gateway")) is EngineUnavailable  # a proxy's
    assert type(from_http(418, None, "x")) is InvalidRequest
