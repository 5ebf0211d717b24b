"""Every vendor tool-call family (tests/vendor_families.py) end to end, through one real
server holding all their scripted checkpoints (each carries its vendor's real template) and
the official SDKs. For each family: chat completions' streamed deltas assemble to the
non-streamed calls, Anthropic tool_use blocks, Responses function calls and `mlxd run --json`
give the same two calls; a tool-result turn is the same prompt in all three APIs; reasoning
is split; a forced tool_choice makes a model that would answer in text call, in its own
syntax. Arguments with non-ASCII text, quotes and nested JSON come through for the JSON and
the XML-like syntaxes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from mlxd.cli.main import main as mlxd_main
from tests.e2e.server.serverproc import ServerProcess, launch, server_env
from tests.vendor_families import ANSWER, BY_NAME, CALLS_TWO, FAMILIES, THOUGHT, TOOLS, WEATHER
from tests.vendor_family import Family, family_checkpoint
from tests.vendor_family_rich import RICH, RICH_CALLS, RICH_TOOLS

NAMES = [f.name for f in FAMILIES]
THINKING = [f.name for f in FAMILIES if f.thinking]
ENFORCED = [f.name for f in FAMILIES if f.enforced]
USER = "What is the weather in Paris, and the time?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server whose store holds every family's two-call, answer and reasoning checkpoints
    (and the rich-argument ones), all kept loaded."""
    home = tmp_path_factory.mktemp("families-home")
    store = home / "mlxd" / "models"
    for f in FAMILIES:
        family_checkpoint(store / f.name, f, "two", f.two_calls)
        family_checkpoint(store / f"{f.name}-answer", f, "answer", ANSWER)
        if f.thinking:
            family_checkpoint(store / f"{f.name}-think", f, "think", f.thinking)
    for name, script in RICH_CALLS.items():
        family_checkpoint(store / f"{name}-rich", BY_NAME[name], "rich", script)
    count = len(list(store.iterdir()))
    srv = launch(["--model", str(store / NAMES[0]), "--max-models", str(count)], server_env(home))
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


def _quiet(family: Family) -> bool:
    """Whether reasoning is switched off for calls (every family's quiet switch is this one)."""
    assert family.quiet_kwargs in ({}, {"enable_thinking": False})
    return bool(family.quiet_kwargs)


def _openai(family: Family, **kwargs: Any) -> dict[str, Any]:
    extra = {"chat_template_kwargs": family.quiet_kwargs} if _quiet(family) else {}
    return {"temperature": 0, "extra_body": extra, **kwargs}


def _anthropic(family: Family, **kwargs: Any) -> dict[str, Any]:
    thinking = {"thinking": {"type": "disabled"}} if _quiet(family) else {}
    return {"extra_body": {"temperature": 0.0}, "system": _system(family), **thinking, **kwargs}


def _responses(family: Family, **kwargs: Any) -> dict[str, Any]:
    effort = {"reasoning": {"effort": "none"}} if _quiet(family) else {}
    return {"temperature": 0, "instructions": _system(family), **effort, **kwargs}


def _openai_messages(family: Family, *rest: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": _system(family)},
        {"role": "user", "content": USER},
        *rest,
    ]


def _anthropic_tools(tools: list[dict[str, Any]] = TOOLS) -> list[dict[str, Any]]:
    return [
        {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]}
        for f in (t["function"] for t in tools)
    ]


def _responses_tools() -> list[dict[str, Any]]:
    return [{"type": "function", **t["function"]} for t in TOOLS]


def _chat_calls(client: openai.OpenAI, family: Family) -> Any:
    messages = _openai_messages(family)
    return client.chat.completions.create(
        **_openai(family, model=family.name, messages=messages, tools=TOOLS, max_tokens=200)
    )


@pytest.mark.parametrize("name", NAMES)
def test_chat_completions_calls_streamed_equal_whole(client: openai.OpenAI, name: str) -> None:
    family = BY_NAME[name]
    r = _chat_calls(client, family)
    msg = r.choices[0].message
    whole = [(c.function.name, c.function.arguments) for c in msg.tool_calls or []]  # type: ignore[union-attr]
    assert [(n, json.loads(a)) for n, a in whole] == CALLS_TWO
    assert not (msg.content or "").strip() and r.choices[0].finish_reason == "tool_calls"
    parts: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    finish = None
    args = _openai(family, model=name, messages=_openai_messages(family), tools=TOOLS)
    for chunk in client.chat.completions.create(**args, max_tokens=200, stream=True):
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
        **_anthropic(
            BY_NAME[name],
            model=name,
            messages=[{"role": "user", "content": USER}],
            tools=_anthropic_tools(),
            max_tokens=200,
        )
    )
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == CALLS_TWO
    assert not "".join(b.text for b in m.content if b.type == "text").strip()
    assert m.stop_reason == "tool_use"


@pytest.mark.parametrize("name", NAMES)
def test_responses_function_calls(client: openai.OpenAI, name: str) -> None:
    r = client.responses.create(
        **_responses(
            BY_NAME[name], model=name, input=USER, tools=_responses_tools(), max_output_tokens=200
        )
    )
    calls = [(i.name, json.loads(i.arguments)) for i in r.output if i.type == "function_call"]
    assert calls == CALLS_TWO and not r.output_text.strip()


def _run_json(server: ServerProcess, argv: list[str], monkeypatch: Any, capsys: Any) -> Any:
    """`mlxd run ... --json` in this process (its own engine, the server's store)."""
    monkeypatch.setenv("MLXD_HOME", server.env["MLXD_HOME"])
    capsys.readouterr()
    assert mlxd_main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", NAMES)
def test_run_json_equals_server(
    client: openai.OpenAI, server: ServerProcess, name: str, monkeypatch: Any, capsys: Any
) -> None:
    family = BY_NAME[name]
    r = _chat_calls(client, family)
    argv = ["-m", name, "--temperature", "0", "--max-tokens", "200", "--system", _system(family)]
    argv += ["--tools", json.dumps(TOOLS), *(["--no-think"] if _quiet(family) else []), USER]
    body = _run_json(server, argv, monkeypatch, capsys)
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
        **_openai(
            family,
            model=name,
            messages=_openai_messages(
                family,
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": result},
            ),
            tools=TOOLS,
            max_tokens=1,
        )
    )
    tool_use = {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": WEATHER}
    tool_result = {"type": "tool_result", "tool_use_id": "call_1", "content": result}
    messages = claude.messages.create(
        **_anthropic(
            family,
            model=name,
            messages=[
                {"role": "user", "content": USER},
                {"role": "assistant", "content": [tool_use]},
                {"role": "user", "content": [tool_result]},
            ],
            tools=_anthropic_tools(),
            max_tokens=1,
        )
    )
    function_call = {"type": "function_call", "call_id": "call_1", "name": "get_weather"}
    function_call["arguments"] = json.dumps(WEATHER)
    output = {"type": "function_call_output", "call_id": "call_1", "output": result}
    responses = client.responses.create(
        **_responses(
            family,
            model=name,
            input=[{"role": "user", "content": USER}, function_call, output],
            tools=_responses_tools(),
            max_output_tokens=16,
        )
    )
    assert chat.usage is not None and responses.usage is not None
    anthropic_prompt = messages.usage.input_tokens + (messages.usage.cache_read_input_tokens or 0)
    counts = (chat.usage.prompt_tokens, anthropic_prompt, responses.usage.input_tokens)
    assert len(set(counts)) == 1, counts


@pytest.mark.parametrize("name", THINKING)
def test_reasoning_is_split(client: openai.OpenAI, name: str) -> None:
    family = BY_NAME[name]
    extra = {"chat_template_kwargs": family.thinking_kwargs} if family.thinking_kwargs else {}
    r = client.chat.completions.create(
        model=f"{name}-think",
        messages=[{"role": "user", "content": USER}],
        temperature=0,
        max_tokens=50,
        extra_body=extra,
    )
    msg = r.choices[0].message
    assert (msg.content, (msg.model_extra or {}).get("reasoning_content")) == ("Sunny.", THOUGHT)


@pytest.mark.parametrize("name", ENFORCED)
def test_forced_tool_choice_through_openai_and_anthropic(
    client: openai.OpenAI, claude: anthropic.Anthropic, name: str
) -> None:
    # A model that would answer in text calls a tool, in its own syntax (the grammar's), when
    # the choice is required (OpenAI) or the tool is named (Anthropic).
    family, model = BY_NAME[name], f"{name}-answer"
    r = client.chat.completions.create(
        **_openai(
            family,
            model=model,
            messages=_openai_messages(family),
            tools=TOOLS,
            tool_choice="required",
            max_tokens=200,
        )
    )
    (call,) = r.choices[0].message.tool_calls or []
    args = json.loads(call.function.arguments)  # type: ignore[union-attr]
    expected = {"get_weather": {"city", "days"}, "get_time": {"zone"}}
    assert set(args) == expected[call.function.name]  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"
    m = claude.messages.create(
        **_anthropic(
            family,
            model=model,
            messages=[{"role": "user", "content": USER}],
            tools=_anthropic_tools(),
            tool_choice={"type": "tool", "name": "get_weather"},
            max_tokens=200,
        )
    )
    (block,) = [b for b in m.content if b.type == "tool_use"]
    assert block.name == "get_weather" and set(block.input) == {"city", "days"}  # type: ignore[arg-type]
    assert m.stop_reason == "tool_use"


@pytest.mark.parametrize("name", sorted(RICH_CALLS))
def test_non_ascii_quoted_and_nested_arguments(
    client: openai.OpenAI, claude: anthropic.Anthropic, name: str
) -> None:
    family = BY_NAME[name]
    messages = _openai_messages(family)
    r = client.chat.completions.create(
        **_openai(family, model=f"{name}-rich", messages=messages, tools=RICH_TOOLS, max_tokens=50)
    )
    (call,) = r.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("save_note", RICH)  # type: ignore[union-attr]
    m = claude.messages.create(
        **_anthropic(
            family,
            model=f"{name}-rich",
            messages=[{"role": "user", "content": USER}],
            tools=_anthropic_tools(RICH_TOOLS),
            max_tokens=50,
        )
    )
    assert [(b.name, b.input) for b in m.content if b.type == "tool_use"] == [("save_note", RICH)]


def test_granite_reasoning_effort_turns_its_thinking_prompt_on(client: openai.OpenAI) -> None:
    # reasoning_effort maps onto the `thinking` switch its template reads: the prompt gains
    # its thinking instructions, and the <response> tags stay out of the answer.
    def ask(**kwargs: Any) -> Any:
        messages: Any = [{"role": "user", "content": USER}]
        model = "granite-3.3-2B-Instruct-think"
        return client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=50, **kwargs
        )

    plain, effort = ask(), ask(reasoning_effort="high")
    assert plain.usage is not None and effort.usage is not None
    assert effort.usage.prompt_tokens > plain.usage.prompt_tokens
    msg = effort.choices[0].message
    assert (msg.content, (msg.model_extra or {}).get("reasoning_content")) == ("Sunny.", THOUGHT)
