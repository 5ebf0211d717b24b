"""Vendor tool-call families end to end (tests/vendor_families.py), through a real server and
the official SDKs: DeepSeek V3.1, Seed-OSS, Nemotron Nano v2 and Phi-4-mini, each a scripted
checkpoint carrying its real template that calls two tools. The same calls come back from
chat completions (streamed deltas assemble to the whole answer), Anthropic tool_use blocks,
Responses function calls and `mlxd run --json`; a tool-result turn is the same prompt in all
three APIs; Seed-OSS's <seed:think> reasoning is split; a forced tool_choice makes models
that would answer in text call, in their own syntax."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.integration.chat.scripted import make_scripted_checkpoint
from tests.vendor_families import ANSWER, BY_NAME, CALLS_TWO, THOUGHT, TOOLS, WEATHER, Family
from tests.vendor_templates import vendor_template

NAMES = ["DeepSeek-V3.1", "ByteDance-Seed-OSS", "NVIDIA-Nemotron-Nano-v2", "Phi-4-mini-instruct"]
USER = "What is the weather in Paris, and the time?"
FORCED = ["DeepSeek-V3.1", "ByteDance-Seed-OSS", "NVIDIA-Nemotron-Nano-v2"]
Calls = list[tuple[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose store holds each family's two-call checkpoint, and Seed-OSS thinking."""
    home = tmp_path_factory.mktemp("families-home")
    store = home / "mlxd" / "models"
    for name in NAMES:
        family = BY_NAME[name]
        make_scripted_checkpoint(store / name, family.two_calls, template=vendor_template(name))
    for name in FORCED:  # these answer in text: a forced choice must make them call
        make_scripted_checkpoint(store / f"{name}-answer", ANSWER, template=vendor_template(name))
    seed = BY_NAME["ByteDance-Seed-OSS"]
    assert seed.thinking is not None
    make_scripted_checkpoint(
        store / "seed-think", seed.thinking, template=vendor_template(seed.name)
    )
    srv = launch(["--model", str(store / NAMES[0])], server_env(home))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def _system(family: Family) -> str:
    return "Be brief." + family.quiet_system


def _openai_messages(family: Family, *rest: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": _system(family)},
        {"role": "user", "content": USER},
        *rest,
    ]


def _anthropic_tools() -> list[dict[str, Any]]:
    return [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in (t["function"] for t in TOOLS)
    ]


def _responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", **t["function"]} for t in TOOLS]


@pytest.mark.parametrize("name", NAMES)
def test_chat_completions_calls_streamed_equal_whole(client: openai.OpenAI, name: str) -> None:
    family = BY_NAME[name]
    args: dict[str, Any] = dict(
        model=name, messages=_openai_messages(family), tools=TOOLS, temperature=0, max_tokens=200
    )
    r = client.chat.completions.create(**args)
    msg = r.choices[0].message
    whole = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]  # type: ignore[union-attr]
    assert [(n, json.loads(a)) for n, a in whole] == CALLS_TWO
    assert not (msg.content or "").strip() and r.choices[0].finish_reason == "tool_calls"
    parts: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    finish = None
    for chunk in client.chat.completions.create(**args, stream=True):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        assert not (choice.delta.content or "").strip()
        for d in choice.delta.tool_calls or []:
            if d.function and d.function.name:
                names[d.index] = d.function.name
            parts.setdefault(d.index, []).append((d.function and d.function.arguments) or "")
    assert [(names[i], "".join(parts[i])) for i in sorted(parts)] == whole
    assert finish == "tool_calls"


@pytest.mark.parametrize("name", NAMES)
def test_anthropic_tool_use_blocks(claude: anthropic.Anthropic, name: str) -> None:
    m = claude.messages.create(
        model=name,
        system=_system(BY_NAME[name]),
        messages=[{"role": "user", "content": USER}],
        tools=_anthropic_tools(),  # type: ignore[arg-type]
        max_tokens=200,
        extra_body={"temperature": 0.0},
    )
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == CALLS_TWO
    assert not "".join(b.text for b in m.content if b.type == "text").strip()
    assert m.stop_reason == "tool_use"


@pytest.mark.parametrize("name", NAMES)
def test_responses_function_calls(client: openai.OpenAI, name: str) -> None:
    r = client.responses.create(
        model=name,
        instructions=_system(BY_NAME[name]),
        input=USER,
        tools=_responses_tools(),  # type: ignore[arg-type]
        max_output_tokens=200,
        temperature=0,
    )
    calls = [(i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"]
    assert calls == CALLS_TWO and not r.output_text.strip()


@pytest.mark.parametrize("name", NAMES)
def test_run_json_equals_server(client: openai.OpenAI, server: ServerProcess, name: str) -> None:
    family = BY_NAME[name]
    r = client.chat.completions.create(
        model=name, messages=_openai_messages(family), tools=TOOLS, temperature=0, max_tokens=200
    )
    cmd = [sys.executable, "-m", "mlxd.cli.main", "run", "-m", name, "--json", "--temperature"]
    cmd += ["0", "--max-tokens", "200", "--system", _system(family), "--tools", json.dumps(TOOLS)]
    done = subprocess.run([*cmd, USER], capture_output=True, text=True, timeout=120, env=server.env)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    served = [
        (c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []
    ]  # type: ignore[union-attr]
    ran = [(c["function"]["name"], c["function"]["arguments"]) for c in body["tool_calls"]]
    assert ran == served and [(n, json.loads(a)) for n, a in ran] == CALLS_TWO
    assert (body["content"] or "") == (r.choices[0].message.content or "")
    assert body["finish_reason"] == r.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("name", NAMES)
def test_tool_result_turn_is_one_prompt_in_every_api(
    client: openai.OpenAI, claude: anthropic.Anthropic, name: str
) -> None:
    # The same conversation (a call to get_weather, its result) spelled in each API's words
    # renders the same prompt: the same prompt token count.
    family, result = BY_NAME[name], '{"temp_c": 21}'
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": json.dumps(WEATHER)}
    chat = client.chat.completions.create(
        model=name,
        messages=_openai_messages(
            family,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ),  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        temperature=0,
        max_tokens=1,
    )
    tool_use = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": WEATHER}
    tool_result = {"type": "tool_result", "tool_use_id": "call_1", "content": result}
    messages = claude.messages.create(
        model=name,
        system=_system(family),
        messages=[
            {"role": "user", "content": USER},
            {"role": "assistant", "content": [tool_use]},
            {"role": "user", "content": [tool_result]},
        ],  # type: ignore[list-item]
        tools=_anthropic_tools(),  # type: ignore[arg-type]
        max_tokens=1,
        extra_body={"temperature": 0.0},
    )
    responses = client.responses.create(
        model=name,
        instructions=_system(family),
        input=[
            {"role": "user", "content": USER},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": json.dumps(WEATHER),
            },
            {"type": "function_call_output", "call_id": "call_1", "output": result},
        ],  # type: ignore[list-item]
        tools=_responses_tools(),  # type: ignore[arg-type]
        max_output_tokens=16,
        temperature=0,
    )
    assert chat.usage is not None and responses.usage is not None
    anthropic_prompt = messages.usage.input_tokens + (messages.usage.cache_read_input_tokens or 0)
    counts = (chat.usage.prompt_tokens, anthropic_prompt, responses.usage.input_tokens)
    assert len(set(counts)) == 1, counts


def test_seed_oss_reasoning_is_split(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(
        model="seed-think",
        messages=[{"role": "user", "content": USER}],
        temperature=0,
        max_tokens=50,
    )
    msg = r.choices[0].message
    assert (msg.content, (msg.model_extra or {}).get("reasoning_content")) == ("Sunny.", THOUGHT)


@pytest.mark.parametrize("name", FORCED)
def test_forced_tool_choice_through_openai_and_anthropic(
    client: openai.OpenAI, claude: anthropic.Anthropic, name: str
) -> None:
    # A model that would answer in text calls a tool, in its own syntax (the grammar's), when
    # the choice is required (OpenAI) or any (Anthropic): DeepSeek with two tools to choose
    # from, Seed-OSS in XML, Nemotron in its JSON list.
    family, model = BY_NAME[name], f"{name}-answer"
    r = client.chat.completions.create(
        model=model,
        messages=_openai_messages(family),  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        tool_choice="required",
        temperature=0,
        max_tokens=200,
    )
    (call,) = r.choices[0].message.tool_calls or []
    args = json.loads(call.function.arguments)  # type: ignore[union-attr]
    expected = {"get_weather": {"city", "days"}, "get_time": {"zone"}}
    assert set(args) == expected[call.function.name]  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"
    m = claude.messages.create(
        model=model,
        system=_system(family),
        messages=[{"role": "user", "content": USER}],
        tools=_anthropic_tools(),  # type: ignore[arg-type]
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=200,
        extra_body={"temperature": 0.0},
    )
    (block,) = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "get_weather" and set(block.input) == {"city", "days"}  # type: ignore[arg-type]
    assert m.stop_reason == "tool_use"
