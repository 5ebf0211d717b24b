"""A forced tool choice on models with no tool-call format of their own, through the three
APIs' official SDKs: `tool_choice` required / named (chat completions, Responses) and `any` /
`tool` (Anthropic) always yield a valid call, written as generic JSON and enforced by the
grammar. On a random-weight tiny checkpoint (the grammar alone guarantees the shape) and on
the demo model (SmolLM2, `-m demo`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.json_schemas import check

PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
DESCRIPTION = "The weather forecast for a city"
USER = "What will the weather be in Paris for the next 3 days?"


def chat_call(srv: ServerProcess, named: bool) -> tuple[str, dict[str, Any]]:
    client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=600)
    fn = {"name": "forecast", "description": DESCRIPTION, "parameters": PARAMS}
    choice: Any = {"type": "function", "function": {"name": "forecast"}} if named else "required"
    r = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": USER}],
        tools=[{"type": "function", "function": fn}],
        tool_choice=choice,
        max_tokens=120,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0].function  # type: ignore[index, union-attr]
    return call.name, json.loads(call.arguments)


def anthropic_call(srv: ServerProcess, named: bool) -> tuple[str, dict[str, Any]]:
    client = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0, timeout=600)
    choice: Any = {"type": "tool", "name": "forecast"} if named else {"type": "any"}
    r = client.messages.create(
        model="default",
        messages=[{"role": "user", "content": USER}],
        tools=[{"name": "forecast", "description": DESCRIPTION, "input_schema": PARAMS}],
        tool_choice=choice,
        max_tokens=120,
        extra_body={"temperature": 0},  # this SDK version no longer names it
    )
    assert r.stop_reason == "tool_use"
    block = next(b for b in r.content if b.type == "tool_use")
    return block.name, dict(block.input)  # type: ignore[arg-type]


def responses_call(srv: ServerProcess, named: bool) -> tuple[str, dict[str, Any]]:
    client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=600)
    tool = {"type": "function", "name": "forecast", "description": DESCRIPTION}
    choice: Any = {"type": "function", "name": "forecast"} if named else "required"
    r = client.responses.create(
        model="default",
        input=USER,
        tools=[{**tool, "parameters": PARAMS}],  # type: ignore[list-item]
        tool_choice=choice,
        max_output_tokens=120,
        temperature=0,
    )
    call = next(i for i in r.output if i.type == "function_call")
    return call.name, json.loads(call.arguments)  # type: ignore[union-attr]


APIS = {"chat": chat_call, "anthropic": anthropic_call, "responses": responses_call}


def assert_calls(srv: ServerProcess) -> None:
    for name, api in APIS.items():
        for named in (False, True):
            tool, arguments = api(srv, named)
            assert tool == "forecast", (name, named)
            check(arguments, PARAMS)


@pytest.fixture(scope="module")
def plain_server(
    tiny_plain_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_plain_model)], server_env(tmp_path_factory.mktemp("plain")))
    yield srv
    srv.stop()


def test_forced_calls_on_a_model_without_a_tool_format(plain_server: ServerProcess) -> None:
    assert_calls(plain_server)


@pytest.mark.demo
def test_forced_calls_on_the_demo_model(tmp_path: Path) -> None:
    srv = launch([], server_env(tmp_path))
    try:
        assert_calls(srv)
    finally:
        srv.stop(timeout=120)
