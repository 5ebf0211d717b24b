"""Multi-turn reuse through every front door of a real `mlxd serve` on a hybrid recurrent model
(lfm2: its convolution state cannot be cut back, so only prompt-boundary snapshots serve):
chat completions, Anthropic messages and Responses, and the prefix-cache metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env

SYSTEM = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
    "Answer about the weather in Paris, in numbers: 0 1 2 3 4 5 6 7 8 9."
)
USERS = ["Hello, how are you today?", "What is the weather like?", "Numbers: 0 1 2 3"]
GREEDY = {"max_tokens": 8, "temperature": 0.0}


@pytest.fixture(scope="module")
def hybrid_server(tiny_hybrid_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    srv = launch(["--model", str(tiny_hybrid_model)], server_env(server_home))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def http(hybrid_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=hybrid_server.base_url, timeout=120) as client:
        yield client


def chat_completion(http: httpx.Client, messages: list[Any]) -> tuple[str, int, int]:
    body = http.post("/chat/completions", json={"messages": messages, **GREEDY}).json()
    usage = body["usage"]
    content = body["choices"][0]["message"]["content"]
    return content, usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


def anthropic_message(http: httpx.Client, messages: list[Any]) -> tuple[str, int, int]:
    body = http.post("/messages", json={"system": SYSTEM, "messages": messages, **GREEDY}).json()
    usage = body["usage"]
    cached = usage["cache_read_input_tokens"]
    text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
    return text, usage["input_tokens"] + cached, cached


def response(http: httpx.Client, messages: list[Any]) -> tuple[str, int, int]:
    body = http.post(
        "/responses",
        json={"instructions": SYSTEM, "input": messages, "max_output_tokens": 8, "temperature": 0},
    ).json()
    usage = body["usage"]
    text = "".join(
        part["text"]
        for item in body["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
    return text, usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize(
    "ask", [chat_completion, anthropic_message, response], ids=["chat", "messages", "responses"]
)
def test_each_turn_reuses_the_previous_prompt(http: httpx.Client, ask: Any) -> None:
    system = [{"role": "system", "content": SYSTEM}] if ask is chat_completion else []
    messages: list[Any] = list(system)
    previous = 0
    for i, user in enumerate(USERS):
        messages.append({"role": "user", "content": f"{ask.__name__} {user}"})
        content, prompt_tokens, cached = ask(http, messages)
        if i == 0:  # at most the system prompt (an earlier conversation may have cached it)
            assert cached < prompt_tokens - len(user) // 4
        else:  # the previous prompt but its last token, at least
            assert cached >= previous - 1 and prompt_tokens > previous
        previous = prompt_tokens
        messages.append({"role": "assistant", "content": content})
    # Regenerate: the last prompt again reuses all but its last token, same greedy answer.
    again, prompt_tokens, cached = ask(http, messages[:-1])
    assert again == content and cached == prompt_tokens - 1


def test_prefix_cache_metrics(http: httpx.Client) -> None:
    text = http.get("/../metrics").text
    assert metric(text, "mlxd_prefix_cache_hits_total") >= 2
    assert metric(text, "mlxd_prefix_cache_misses_total") >= 1
    assert metric(text, "mlxd_cached_prompt_tokens_total") > 0
    assert metric(text, "mlxd_prefix_cache_entries") >= 1
    assert metric(text, "mlxd_prefix_cache_bytes") > 0
    assert metric(text, "mlxd_prefix_cache_pruned_total") > 0
    assert "\nmlxd_prefix_cache_evictions_total " in text


def test_serve_prefix_cache_dir_survives_a_restart(
    tiny_hybrid_model: Path, server_home: Path, tmp_path: Path
) -> None:
    args = ["--model", str(tiny_hybrid_model), "--prefix-cache-dir", str(tmp_path)]
    messages: list[Any] = [{"role": "system", "content": SYSTEM}]
    previous = 0
    for restart in (False, True):
        srv = launch(args, server_env(server_home))
        try:
            with httpx.Client(base_url=srv.base_url, timeout=120) as client:
                messages.append({"role": "user", "content": f"restart={restart} {USERS[0]}"})
                content, prompt_tokens, cached = chat_completion(client, messages)
                messages.append({"role": "assistant", "content": content})
        finally:
            srv.stop()
        if restart:  # the first server's snapshots, read back by the second
            assert cached >= previous - 1
        previous = prompt_tokens
    assert list(tmp_path.glob("*/*.safetensors"))
