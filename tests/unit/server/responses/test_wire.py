"""The Responses wire on scripted chat events: the streamed items are the final response's
and the one body's, items follow the events in order, max_output_tokens makes an incomplete
response, and an error after the stream started fails the response."""

from __future__ import annotations

from typing import Any

import pytest

from mlxd.server.responses.schemas import ResponsesRequest
from mlxd.server.responses.wire import ResponsesWire
from mlxd.types import ChatEvent, FinishEvent, FinishReason, TextDelta, Usage
from tests.unit.server.scripted_app import DONE, FAILED, SCRIPTS, run, sse, sse_text

KINDS = {"text": "message", "thinking": "reasoning", "tool_use": "function_call"}
USAGE = Usage(prompt_tokens=10, completion_tokens=5, cached_tokens=4)


def both(
    events: list[ChatEvent], **fields: Any
) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    """(streamed frames, one body) for the same events."""
    req = ResponsesRequest.model_validate({"input": "hi", **fields})
    streamed, whole = ResponsesWire("m", req), ResponsesWire("m", req)
    frames = streamed.opening() + [f for ev in events for f in streamed.frames(ev)]
    for ev in events[:-1]:
        whole.add(ev)
    assert isinstance(events[-1], FinishEvent)
    return sse(frames), whole.response(events[-1])


def strip_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k != "id"} for item in items]


@pytest.mark.parametrize(("events", "kinds"), [c[1:] for c in SCRIPTS], ids=[c[0] for c in SCRIPTS])
def test_stream_builds_the_body(events: list[ChatEvent], kinds: list[str]) -> None:
    frames, body = both(events)
    assert [i["type"] for i in body["output"]] == [KINDS[k] for k in kinds]
    names = [n for n, _ in frames]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in frames] == list(range(len(frames)))
    done = [d["item"] for n, d in frames if n == "response.output_item.done"]
    final = frames[-1][1]["response"]
    assert final["output"] == done  # the stream's items are the final response's
    assert strip_ids(done) == strip_ids(body["output"])  # and the one body's, but for ids
    added = [d["output_index"] for n, d in frames if n == "response.output_item.added"]
    assert added == list(range(len(kinds)))
    text = "".join(d["delta"] for n, d in frames if n == "response.output_text.delta")
    assert text == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 4
    assert final["status"] == body["status"] == "completed"


def test_length_is_incomplete() -> None:
    frames, body = both([TextDelta("x"), FinishEvent(FinishReason.LENGTH, USAGE)])
    assert frames[-1][0] == "response.incomplete"
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["status"] == "incomplete"


def test_the_request_is_echoed() -> None:
    tools = [{"type": "function", "name": "f"}]
    _, body = both(
        [DONE], instructions="Be brief.", tools=tools, tool_choice="required", temperature=0.5
    )
    assert body["instructions"] == "Be brief." and body["temperature"] == 0.5
    assert body["tool_choice"] == "required" and body["tools"][0]["name"] == "f"
    assert body["store"] is False and body["previous_response_id"] is None


def test_error_after_start_fails_the_response(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"input": "hi"}
    r, stream = run(
        monkeypatch, [TextDelta("Hel"), FAILED], "/v1/responses", {**body, "stream": True}
    )
    frames = sse_text(r.text)
    assert [n for n, _ in frames][-2:] == ["error", "response.failed"]
    assert frames[-2][1]["code"] == "engine_error" and frames[-2][1]["message"] == "boom"
    failed = frames[-1][1]["response"]
    assert failed["status"] == "failed" and failed["error"]["message"] == "boom"
    assert stream.cancelled
    r, _ = run(monkeypatch, [TextDelta("Hel"), FAILED], "/v1/responses", body)
    assert r.status_code == 500 and r.json()["error"]["code"] == "engine_error"
