"""The Anthropic wire on scripted chat events: the SDK's own accumulator over the stream gives
the one-body message, blocks follow the events in order, and errors keep Anthropic's shape
before and after the stream started."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.server.anthropic.wire import AnthropicWire
from mlxd.types import ChatEvent, FinishEvent, FinishReason, TextDelta, ToolCall, Usage
from tests.unit.server.scripted_app import (
    CALL,
    CALLS,
    DONE,
    FAILED,
    SCRIPTS,
    USAGE,
    run,
    sse,
    sse_text,
)

BODY = {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def both(events: list[ChatEvent]) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """(streamed frames, one body) for the same events."""
    streamed, whole = AnthropicWire("m", prompt_tokens=10), AnthropicWire("m", prompt_tokens=10)
    frames = streamed.opening() + [f for ev in events for f in streamed.frames(ev)]
    for ev in events[:-1]:
        whole.add(ev)
    assert isinstance(events[-1], FinishEvent)
    return sse(frames), whole.response(events[-1])


@pytest.mark.parametrize(("events", "kinds"), [c[1:] for c in SCRIPTS], ids=[c[0] for c in SCRIPTS])
def test_stream_builds_the_body(events: list[ChatEvent], kinds: list[str]) -> None:
    """The SDK's own accumulator over our stream gives the non-streaming message."""
    from anthropic.lib.streaming._messages import accumulate_event

    frames, body = both(events)
    assert [b["type"] for b in body["content"]] == kinds
    names = [n for n, _ in frames]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == len(kinds)
    snapshot = None
    bufs: dict[int, bytes] = {}
    for _, data in frames:
        # a plain dict: the accumulator builds the typed event itself
        snapshot = accumulate_event(event=data, current_snapshot=snapshot, json_bufs=bufs)  # type: ignore[arg-type]
    assert snapshot is not None
    assert snapshot.to_dict()["content"] == body["content"]
    assert snapshot.stop_reason == body["stop_reason"]
    assert snapshot.usage.to_dict() == body["usage"]


def test_usage_splits_the_cache() -> None:
    _, body = both([TextDelta("x"), DONE])
    assert body["usage"] == {
        "input_tokens": 6,
        "output_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None


def test_stop_reasons() -> None:
    stopped = FinishEvent(FinishReason.STOP, USAGE, stop_string="##")
    _, body = both([TextDelta("x"), stopped])
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "##")
    _, body = both([TextDelta("x"), FinishEvent(FinishReason.LENGTH, USAGE)])
    assert body["stop_reason"] == "max_tokens"
    _, body = both([CALL, CALLS])
    assert body["stop_reason"] == "tool_use"
    assert body["content"][0]["input"] == {"city": "Paris"}


def test_tool_input_is_always_an_object() -> None:
    _, body = both([ToolCall("c", "f", "[1, 2]"), ToolCall("d", "g", "not json"), CALLS])
    assert [b["input"] for b in body["content"]] == [
        {"arguments": [1, 2]},
        {"arguments": "not json"},
    ]


def test_error_after_start_is_an_error_event(monkeypatch: pytest.MonkeyPatch) -> None:
    r, stream = run(
        monkeypatch, [TextDelta("Hel"), FAILED], "/v1/messages", {**BODY, "stream": True}
    )
    assert r.status_code == 200
    frames = sse_text(r.text)
    assert [n for n, _ in frames][-1] == "error"
    assert frames[-1][1] == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    assert "message_stop" not in [n for n, _ in frames]
    assert stream.cancelled


def test_error_without_stream_keeps_its_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _ = run(monkeypatch, [TextDelta("Hel"), FAILED], "/v1/messages", BODY)
    assert r.status_code == 500
    assert r.json() == {"type": "error", "error": {"type": "api_error", "message": "boom"}}
    busy = FinishEvent(FinishReason.ERROR, Usage(), error="queue full", error_code="queue_full")
    r, _ = run(monkeypatch, [busy], "/v1/messages", BODY)
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
