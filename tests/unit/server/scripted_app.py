"""Helpers for the API wire tests: SSE frames parsed, and the app over a fake engine whose
start_chat returns a scripted ChatStream."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import mlxd.chat.session as session
from mlxd.server.app import create_app
from mlxd.server.settings import ServerSettings
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

USAGE = Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=4)
DONE = FinishEvent(FinishReason.STOP, USAGE)
CALLS = FinishEvent(FinishReason.TOOL_CALLS, USAGE)
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
CALL2 = ToolCall("call_2", "get_time", "{}", index=1)
FAILED = FinishEvent(FinishReason.ERROR, Usage(3, 1), error="boom", error_code="engine_error")

# (case id, events, expected Anthropic block kinds in order)
SCRIPTS: list[tuple[str, list[ChatEvent], list[str]]] = [
    ("text", [TextDelta("Hel"), TextDelta("lo"), DONE], ["text"]),
    (
        "think-text",
        [ReasoningDelta("hm"), ReasoningDelta("m"), TextDelta("Hi"), DONE],
        ["thinking", "text"],
    ),
    (
        "think-call-call",
        [ReasoningDelta("plan"), CALL, CALL2, CALLS],
        ["thinking", "tool_use", "tool_use"],
    ),
    ("text-call-text", [TextDelta("a"), CALL, TextDelta("b"), CALLS], ["text", "tool_use", "text"]),
    ("empty-and-warning", [TextDelta(""), Warning("w"), TextDelta("x"), DONE], ["text"]),
    ("nothing", [DONE], []),
]


def sse(frames: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each frame; every frame names its event."""
    out = []
    for frame in frames:
        lines = frame.decode().strip().split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ")
        name, data = lines[0][7:], json.loads(lines[1][6:])
        assert data["type"] == name
        out.append((name, data))
    return out


def sse_text(text: str) -> list[tuple[str, dict[str, Any]]]:
    return sse([f.encode() for f in text.strip().split("\n\n")])


@dataclass
class FakeInfo:
    name: str = "fake"
    tokenizer: Any = None


class FakeEngine:
    def health(self) -> Any:
        return type("H", (), {"ok": True, "state": "ready", "detail": None})()


@dataclass
class FakePrompt:
    prompt_tokens: int = 3


class ScriptedStream:
    def __init__(self, events: list[ChatEvent]) -> None:
        self.events = events
        self.cancelled = False
        self.cancel_threads: list[int] = []  # the thread of each cancel() call
        self.start_thread = threading.get_ident()  # the thread start_chat ran on
        self.prompt = FakePrompt()

    async def admitted(self, within: float) -> Usage:
        return Usage()

    def cancel(self) -> None:
        self.cancelled = True
        self.cancel_threads.append(threading.get_ident())

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        for ev in self.events:
            await asyncio.sleep(0)
            yield ev


def run(
    monkeypatch: pytest.MonkeyPatch, events: list[ChatEvent], path: str, body: dict[str, Any]
) -> tuple[httpx.Response, ScriptedStream]:
    """POST `body` to the app, whose start_chat gives a stream of `events`."""
    made: list[ScriptedStream] = []

    def fake_start_chat(*_: Any, **__: Any) -> ScriptedStream:
        made.append(ScriptedStream(events))
        return made[-1]

    monkeypatch.setattr(session, "start_chat", fake_start_chat)
    app = create_app(FakeEngine(), ServerSettings(), default_model=FakeInfo())  # type: ignore[arg-type]

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.post(path, json=body)

    return asyncio.run(go()), made[0]
