"""The one-engine contract: for the same chat request under greedy decoding, `mlxd run
--json` content equals the server's /v1/chat/completions content byte for byte."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.cli.cli_helpers import SRC, one_json_line, run_mlxd
from tests.e2e.cli.serve_helper import mlxd_server

REQUESTS = [
    {"prompt": "Hello, how are you today?", "system": "Answer briefly.", "max_tokens": 16},
    {"prompt": "café naïve 日本語 😀", "system": None, "max_tokens": 20},
]


def offline_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC
    env.update(
        HF_HOME=str(home / "hf"),
        MLXD_HOME=str(home / "mlxd"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    return env


@pytest.fixture(scope="module")
def server(
    tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[openai.OpenAI, dict[str, str]]]:
    env = offline_env(tmp_path_factory.mktemp("parity-home"))
    with mlxd_server(tiny_chat_model, env) as base_url:
        yield openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0), env


def messages(request: dict) -> list[dict[str, str]]:
    head = [{"role": "system", "content": request["system"]}] if request["system"] else []
    return head + [{"role": "user", "content": request["prompt"]}]


def cli_args(request: dict) -> list[str]:
    system = ["--system", request["system"]] if request["system"] else []
    return [
        request["prompt"],
        *system,
        "--max-tokens",
        str(request["max_tokens"]),
        "--temperature",
        "0",
    ]


@pytest.mark.parametrize("request_", REQUESTS, ids=["system", "unicode"])
def test_run_json_equals_server_content(
    server: tuple[openai.OpenAI, dict[str, str]], tiny_chat_model: Path, request_: dict
) -> None:
    client, env = server
    reply = client.chat.completions.create(
        model="default",
        messages=messages(request_),
        max_tokens=request_["max_tokens"],
        temperature=0,
    )
    proc = run_mlxd("run", str(tiny_chat_model), *cli_args(request_), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    choice = reply.choices[0]
    assert body["content"] == (choice.message.content or "")
    assert (body["reasoning"] or None) == (
        getattr(choice.message, "reasoning_content", None) or None
    )
    assert body["finish_reason"] == choice.finish_reason
    assert body["usage"]["completion_tokens"] == reply.usage.completion_tokens
    assert body["usage"]["prompt_tokens"] == reply.usage.prompt_tokens


def test_run_json_schema_equals_server_structured_content(
    server: tuple[openai.OpenAI, dict[str, str]], tiny_chat_model: Path
) -> None:
    """--json-schema maps through the option table onto the server's response_format."""
    client, env = server
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 500},
                       "w": {"enum": ["up", "down"]}},
        "required": ["n", "w"],
        "additionalProperties": False,
    }  # fmt: skip
    reply = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Count."}],
        max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    proc = run_mlxd(
        "run", str(tiny_chat_model), "Count.", "--max-tokens", "80", "--no-think",
        "--json-schema", json.dumps(schema), "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == reply.choices[0].message.content
    assert body["finish_reason"] == reply.choices[0].finish_reason == "stop"
    assert set(json.loads(body["content"])) == {"n", "w"}


def test_run_json_equals_server_with_a_stop_string(
    server: tuple[openai.OpenAI, dict[str, str]], tiny_chat_model: Path
) -> None:
    """A stop string ends both answers at the same token: the same content and the same usage,
    which counts no token generated after the one that completed the stop string."""
    client, env = server
    request = REQUESTS[0]
    kw = dict(model="default", messages=messages(request), max_tokens=24, temperature=0)
    full = client.chat.completions.create(**kw, extra_body={"ignore_eos": True})  # type: ignore[call-overload]
    text = full.choices[0].message.content or ""
    assert len(text) >= 12 and full.usage.completion_tokens == 24, text
    stop = text[8:11]
    reply = client.chat.completions.create(**kw, stop=[stop], extra_body={"ignore_eos": True})  # type: ignore[call-overload]
    args = [*cli_args({**request, "max_tokens": 24}), "--stop", stop, "--ignore-eos", "--json"]
    proc = run_mlxd("run", str(tiny_chat_model), *args, env=env)
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["content"] == reply.choices[0].message.content == text[: text.index(stop)]
    assert body["finish_reason"] == reply.choices[0].finish_reason == "stop"
    assert body["usage"]["completion_tokens"] == reply.usage.completion_tokens < 24


@pytest.mark.parametrize("choice", ["required", "clock"])
def test_run_tool_choice_equals_server_forced_call(
    server: tuple[openai.OpenAI, dict[str, str]], tiny_chat_model: Path, choice: str
) -> None:
    """--tool-choice maps onto the server's tool_choice: the same forced call, the same prompt
    (the chat layer adds the same hint for both)."""
    client, env = server
    tools = [
        {"type": "function", "function": {"name": "weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}},
            "required": ["city"], "additionalProperties": False}}},
        {"type": "function", "function": {"name": "clock"}},
    ]  # fmt: skip
    wire = choice if choice == "required" else {"type": "function", "function": {"name": choice}}
    reply = client.chat.completions.create(  # type: ignore[call-overload]
        model="default",
        messages=[{"role": "user", "content": "Now what?"}],
        max_tokens=60,
        tools=tools,
        tool_choice=wire,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    proc = run_mlxd(
        "run", str(tiny_chat_model), "Now what?", "--max-tokens", "60", "--no-think",
        "--tools", json.dumps(tools), "--tool-choice", choice, "--json", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    message = reply.choices[0].message
    assert body["finish_reason"] == reply.choices[0].finish_reason == "tool_calls"
    served = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    ran = [(c["function"]["name"], c["function"]["arguments"]) for c in body["tool_calls"]]
    assert ran == served and len(ran) == 1
    assert choice == "required" or ran[0][0] == choice
    assert body["usage"]["prompt_tokens"] == reply.usage.prompt_tokens
