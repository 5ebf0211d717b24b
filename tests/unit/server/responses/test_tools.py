"""Codex's tools on /v1/responses (responses.tools): namespace tools flattened into functions
and their calls named back with their namespace, custom (freeform) tools as one-string
functions whose calls come back as custom_tool_call items, hosted tools dropped, other types
refused naming the type. The request is tests/e2e/server/recordings/codex_0_171_default.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.errors import InvalidRequest
from mlxd.server.request_inputs import parse
from mlxd.server.responses.schemas import ResponsesRequest
from mlxd.server.responses.wire import ResponsesWire
from mlxd.server.settings import ServerSettings
from mlxd.types import FinishEvent, FinishReason, ToolCall, Usage

RECORDING = Path(__file__).parents[3] / "e2e" / "server" / "recordings" / "codex_0_171_default.json"
CODEX = json.loads(RECORDING.read_text())["request"]


def request(**changes: Any) -> ResponsesRequest:
    return parse(ResponsesRequest, json.dumps({**CODEX, **changes}).encode(), ServerSettings())


def test_codex_tools_become_functions_and_hosted_ones_are_dropped():
    flat = request().flat_tools()
    names = [t["function"]["name"] for t in flat.functions]
    assert names == [
        "exec_command",
        "write_stdin",
        "update_plan",
        "apply_patch",
        "view_image",
        "spawn_agent",
        "send_input",
        "wait_agent",
        "close_agent",
    ]
    assert flat.dropped == ["web_search"]
    assert flat.origins["spawn_agent"].namespace == "multi_agent_v1"
    patch = flat.functions[names.index("apply_patch")]["function"]
    assert patch["parameters"]["required"] == ["input"] and flat.origins["apply_patch"].custom


def test_a_name_two_groups_share_is_qualified_by_its_namespace():
    group = {"type": "namespace", "name": "mcp__git__", "tools": [CODEX["tools"][0]]}
    flat = request(tools=[CODEX["tools"][0], group]).flat_tools()
    assert list(flat.origins) == ["exec_command", "mcp__git__exec_command"]
    assert flat.flat_name("exec_command", "mcp__git__") == "mcp__git__exec_command"


def test_an_unknown_tool_type_is_refused_naming_it():
    with pytest.raises(InvalidRequest) as err:
        request(tools=[{"type": "quantum_oracle"}])
    assert "quantum_oracle" in err.value.message and "function" in err.value.message


def calls_body(req: ResponsesRequest, *calls: ToolCall) -> list[dict[str, Any]]:
    wire = ResponsesWire("m", req)
    for call in calls:
        wire.add(call)
    body = wire.response(FinishEvent(FinishReason.TOOL_CALLS, Usage()))
    return [{k: v for k, v in item.items() if k != "id"} for item in body["output"]]


def test_calls_come_back_as_codex_looks_them_up():
    spawn = ToolCall("call_1", "spawn_agent", '{"message": "run the tests"}', 0)
    patch = ToolCall("call_2", "apply_patch", '{"input": "*** Begin Patch\\n*** End Patch\\n"}', 1)
    function_call, custom_call = calls_body(request(), spawn, patch)
    assert function_call == {
        "type": "function_call",
        "status": "completed",
        "call_id": "call_1",
        "name": "spawn_agent",
        "namespace": "multi_agent_v1",
        "arguments": '{"message": "run the tests"}',
    }
    assert custom_call == {
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": "call_2",
        "name": "apply_patch",
        "input": "*** Begin Patch\n*** End Patch\n",
    }


def test_earlier_calls_in_input_are_named_as_the_model_saw_them():
    history = [
        *CODEX["input"],
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "agent-1"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "P"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
    ]
    messages = request(input=history).chat_messages()
    calls = [c["function"] for m in messages for c in m.get("tool_calls", [])]
    assert calls == [
        {"name": "spawn_agent", "arguments": "{}"},
        {"name": "apply_patch", "arguments": '{"input": "P"}'},
    ]
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["agent-1", "Done"]
