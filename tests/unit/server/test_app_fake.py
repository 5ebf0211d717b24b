"""The app over a fake engine and a scripted ChatStream: the paths a real tiny model rarely
takes (an engine error after streaming started, an error FinishEvent without a stream)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

import mlxd.chat.session as session
from mlxd.engine.stats import EngineStats
from mlxd.server.app import create_app
from mlxd.server.settings import ServerSettings
from mlxd.types import ChatEvent, FinishEvent, FinishReason, TextDelta, Usage


@dataclass
class FakeInfo:
    name: str = "fake"
    tokenizer: Any = None


class FakeEngine:
    def health(self) -> Any:
        return type("H", (), {"ok": True, "state": "ready", "detail": None})()

    def stats(self) -> EngineStats:
        return EngineStats(running=0, waiting=0)


class ScriptedStream:
    def __init__(self, events: list[ChatEvent]) -> None:
        self.events = events
        self.cancelled = False

    async def admitted(self, within: float) -> Usage:
        return Usage()

    def cancel(self) -> None:
        self.cancelled = True

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        for ev in self.events:
            await asyncio.sleep(0)
            yield ev


FAILED = FinishEvent(
    FinishReason.ERROR, Usage(3, 1), error="engine fault: boom", error_code="engine_error"
)


@pytest.fixture
def app_with(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def build(events: list[ChatEvent]) -> tuple[Any, list[ScriptedStream]]:
        made: list[ScriptedStream] = []

        def fake_start_chat(engine: Any, info: Any, messages: Any, **kw: Any) -> ScriptedStream:
            made.append(ScriptedStream(events))
            return made[-1]

        monkeypatch.setattr(session, "start_chat", fake_start_chat)
        return create_app(FakeEngine(), ServerSettings(), default_model=FakeInfo()), made

    return build


def post(app: Any, body: dict[str, Any]) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.post("/v1/chat/completions", json=body)

    return asyncio.run(go())


BODY = {"messages": [{"role": "user", "content": "hi"}]}


def test_error_after_stream_started_is_a_final_error_event(app_with) -> None:  # type: ignore[no-untyped-def]
    app, made = app_with([TextDelta("Hel"), FAILED])
    r = post(app, {**BODY, "stream": True})
    assert r.status_code == 200
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[1])["choices"][0]["delta"]["content"] == "Hel"
    err = json.loads(events[-2])["error"]
    assert err["code"] == "engine_error" and "boom" in err["message"]
    assert events[-1] == "[DONE]"
    assert made[0].cancelled  # the finally always releases the request


def test_error_finish_without_stream_is_an_http_error(app_with) -> None:  # type: ignore[no-untyped-def]
    app, _ = app_with([TextDelta("Hel"), FAILED])
    r = post(app, BODY)
    assert r.status_code == 500
    assert r.json()["error"]["code"] == "engine_error"


def test_queue_full_finish_keeps_429(app_with) -> None:  # type: ignore[no-untyped-def]
    busy = FinishEvent(FinishReason.ERROR, Usage(), error="queue full", error_code="queue_full")
    app, _ = app_with([busy])
    r = post(app, BODY)
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
