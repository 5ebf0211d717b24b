"""One engine, four front doors: for the same conversation, greedy decoding gives the same
answer (text, reasoning, tool calls, finish) from /v1/chat/completions, /v1/messages,
/v1/responses and `mlxd run --json`."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess

SYSTEM = "You are a terse assistant."
PROMPT = "What is the capital of France?"
TOOL = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
MAX_TOKENS = 16

# finish reasons in the CLI's (OpenAI's) words
ANTHROPIC_FINISH = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


@dataclass(frozen=True)
class Answer:
    content: str
    reasoning: str
    calls: tuple[tuple[str, Any], ...]  # (name, arguments as an object)
    finish: str


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def via_chat(client: openai.OpenAI, model: str, tools: bool) -> Answer:
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}],
        max_tokens=MAX_TOKENS,
        temperature=0,
        tools=[{"type": "function", "function": TOOL}] if tools else openai.omit,  # type: ignore[list-item]
    )
    msg = r.choices[0].message
    calls = tuple((c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls or [])  # type: ignore[union-attr]
    reasoning = (msg.model_extra or {}).get("reasoning_content") or ""
    return Answer(msg.content or "", reasoning, calls, r.choices[0].finish_reason)


def via_messages(claude: anthropic.Anthropic, model: str, tools: bool) -> Answer:
    anthropic_tool = {
        "name": TOOL["name"],
        "description": TOOL["description"],
        "input_schema": TOOL["parameters"],
    }
    m = claude.messages.create(
        model=model,
        system=SYSTEM,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=MAX_TOKENS,
        tools=[anthropic_tool] if tools else anthropic.omit,  # type: ignore[list-item]
        extra_body={"temperature": 0.0},
    )
    content = "".join(b.text for b in m.content if b.type == "text")
    reasoning = "".join(b.thinking for b in m.content if b.type == "thinking")
    calls = tuple((b.name, b.input) for b in m.content if b.type == "tool_use")
    return Answer(content, reasoning, calls, ANTHROPIC_FINISH[m.stop_reason or ""])


def via_responses(client: openai.OpenAI, model: str, tools: bool) -> Answer:
    r = client.responses.create(
        model=model,
        instructions=SYSTEM,
        input=PROMPT,
        max_output_tokens=MAX_TOKENS,
        temperature=0,
        tools=[{"type": "function", **TOOL}] if tools else openai.omit,  # type: ignore[list-item]
    )
    reasoning = "".join(
        part.text for item in r.output if item.type == "reasoning" for part in item.content or []
    )
    calls = tuple(
        (item.name, json.loads(item.arguments)) for item in r.output if item.type == "function_call"
    )
    finish = "length" if r.status == "incomplete" else ("tool_calls" if calls else "stop")
    return Answer(r.output_text, reasoning, calls, finish)


def via_cli(server: ServerProcess, model: str, tools: bool) -> Answer:
    cmd = [sys.executable, "-m", "mlxd.cli.main", "run", "-m", model, "--json"]
    cmd += ["--system", SYSTEM, "--max-tokens", str(MAX_TOKENS), "--temperature", "0"]
    if tools:
        cmd += ["--tools", json.dumps([{"type": "function", "function": TOOL}])]
    done = subprocess.run(
        [*cmd, PROMPT], capture_output=True, text=True, timeout=120, env=server.env
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    calls = tuple(
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in out.get("tool_calls") or []
    )
    return Answer(out["content"] or "", out.get("reasoning") or "", calls, out["finish_reason"])


@pytest.mark.parametrize(
    ("model", "tools"), [("tiny-chat", False), ("scripted", True)], ids=["text", "tool-call"]
)
def test_same_answer_from_every_front_door(
    client: openai.OpenAI,
    claude: anthropic.Anthropic,
    server: ServerProcess,
    tiny_chat_model: Path,
    model: str,
    tools: bool,
) -> None:
    served = "default" if model == "tiny-chat" else model
    cli_model = str(tiny_chat_model) if model == "tiny-chat" else model
    chat = via_chat(client, served, tools)
    assert via_messages(claude, served, tools) == chat
    assert via_responses(client, served, tools) == chat
    assert via_cli(server, cli_model, tools) == chat
    if tools:  # the scripted model really thinks and calls, so the comparison covers both
        assert chat.reasoning == "Let me see." and chat.calls == (
            ("get_weather", {"city": "Paris"}),
        )
    else:
        assert chat.content
