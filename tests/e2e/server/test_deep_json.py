"""JSON nested ~1000 levels inside a string field (a tool call's `arguments` in chat history,
a Responses `function_call.arguments`) or in the body itself is a 400 in the API's own error
shape, with no traceback in the server's log, and the server keeps serving."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess

LEVELS = 1000
DEEP_TEXT = '{"a": ' + "[" * LEVELS + "]" * LEVELS + "}"
DEEP_VALUE = "__DEEP__"  # replaced by DEEP_TEXT itself in the body's JSON text

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP_TEXT}}
CASES: list[tuple[str, str, dict[str, Any], str]] = [
    (
        "chat-tool-call-arguments",
        "/v1/chat/completions",
        {
            "max_tokens": 2,
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "c1", "content": "1"},
            ],
        },
        "deeper than",
    ),
    (
        "responses-function-call-arguments",
        "/v1/responses",
        {
            "max_output_tokens": 16,
            "input": [
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": DEEP_TEXT},
                {"type": "function_call_output", "call_id": "c", "output": "1"},
            ],
        },
        "deeper than",
    ),
    (
        "messages-tool-use-input",
        "/v1/messages",
        {
            "max_tokens": 2,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "t", "name": "f", "input": DEEP_VALUE}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
            ],
        },
        "JSON",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_deep_json_is_a_400_without_a_traceback(
    server: ServerProcess, http: httpx.Client, path: str, body: dict[str, Any], words: str
) -> None:
    logged = len(server.stderr)
    text = json.dumps({"model": "default", **body}).replace(f'"{DEEP_VALUE}"', DEEP_TEXT)
    r = http.post(server.url + path, content=text, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and words in error["message"]
    if path == "/v1/messages":
        assert r.json()["type"] == "error"
    ok = http.post("/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200
    log = "".join(server.stderr[logged:])
    assert "Traceback" not in log and "RecursionError" not in log, log
