"""Ollama's wire: NDJSON lines, the last one's fields, tool calls with object arguments."""

from __future__ import annotations

import json
import time

from mlxd.errors import InvalidRequest
from mlxd.server.error_responses import error_body
from mlxd.server.ollama.wire import OllamaWire
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage

DONE = FinishEvent(FinishReason.LENGTH, Usage(prompt_tokens=7, completion_tokens=2))


def lines(frames: list[bytes]) -> list[dict[str, object]]:
    assert all(f.endswith(b"\n") and f.count(b"\n") == 1 for f in frames)
    return [json.loads(f) for f in frames]


def test_chat_stream_lines() -> None:
    wire = OllamaWire(model="m", received_ns=time.perf_counter_ns())
    (think,) = lines(wire.frames(ReasoningDelta("hm")))
    (text,) = lines(wire.frames(TextDelta("Hi")))
    (call,) = lines(wire.frames(ToolCall("call_1", "f", '{"a": 1}')))
    (last,) = lines(wire.frames(DONE))
    assert think["message"] == {"role": "assistant", "content": "", "thinking": "hm"}
    assert text["message"] == {"role": "assistant", "content": "Hi"} and text["done"] is False
    assert call["message"]["tool_calls"] == [  # type: ignore[index]
        {"id": "call_1", "function": {"index": 0, "name": "f", "arguments": {"a": 1}}}
    ]
    assert last["done"] is True and last["done_reason"] == "length"
    assert (last["prompt_eval_count"], last["eval_count"]) == (7, 2)
    assert lines(wire.closing()) == [] and json.loads(wire.keep_alive())["done"] is False


def test_generate_body() -> None:
    wire = OllamaWire(model="m", received_ns=time.perf_counter_ns(), chat=False)
    wire.add(TextDelta("a"))
    wire.add(TextDelta("b"))
    body = wire.response(FinishEvent(FinishReason.STOP, Usage(3, 2)))
    assert body["response"] == "ab" and body["done_reason"] == "stop" and body["context"] == []
    durations = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")
    assert all(isinstance(body[k], int) and body[k] >= 0 for k in durations)


def test_errors_in_ollama_shape() -> None:
    err = InvalidRequest("bad", param="x")
    assert error_body(err, "/api/chat") == {"error": "bad"}
    assert "message" in error_body(err, "/v1/chat/completions")["error"]
    wire = OllamaWire(model="m", received_ns=0)
    assert lines(wire.error_frames(err)) == [{"error": "bad"}]
