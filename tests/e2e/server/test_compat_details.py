"""Smaller OpenAI-compatibility and clarity points over HTTP (issue 11, item 10)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, server_env

USER = [{"role": "user", "content": "hi"}]
FIXED = "<|im_start|>user\nfixed<|im_end|>\n<|im_start|>assistant\n"  # ignores the messages


def post(server: ServerProcess, **fields: object) -> httpx.Response:
    body = {"messages": USER, "max_tokens": 2, **fields}
    return httpx.post(server.base_url + "/chat/completions", json=body, timeout=120)


def test_assistant_message_has_refusal_null(server: ServerProcess) -> None:
    message = post(server).json()["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None
    with httpx.stream(
        "POST",
        server.base_url + "/chat/completions",
        json={"messages": USER, "max_tokens": 2, "stream": True},
        timeout=120,
    ) as r:
        first = next(line for line in r.iter_lines() if line.startswith("data: "))
    delta = json.loads(first[len("data: ") :])["choices"][0]["delta"]
    assert delta["role"] == "assistant" and "refusal" in delta and delta["refusal"] is None


def test_models_default_is_the_default_model(server: ServerProcess) -> None:
    r = httpx.get(server.base_url + "/models/default", timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == server.model and r.json()["object"] == "model"


def test_request_chat_template_is_refused_by_default(server: ServerProcess) -> None:
    r = post(server, chat_template=FIXED)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "chat_template" and "MLXD_REQUEST_CHAT_TEMPLATE" in err["message"]


@pytest.fixture(scope="module")
def template_server(tiny_chat_model: Path, server_home: Path) -> Iterator[ServerProcess]:
    env = server_env(server_home, MLXD_REQUEST_CHAT_TEMPLATE="1")
    srv = launch(["--model", str(tiny_chat_model)], env)
    yield srv
    srv.stop()


def test_request_chat_template_when_the_operator_allows_it(
    template_server: ServerProcess,
) -> None:
    short = post(template_server, chat_template=FIXED).json()["usage"]["prompt_tokens"]
    long_messages = [{"role": "user", "content": "a much longer question " * 20}]
    r = post(template_server, chat_template=FIXED, messages=long_messages)
    assert r.json()["usage"]["prompt_tokens"] == short  # the request's template was used
    assert post(template_server).json()["usage"]["prompt_tokens"] != short
    bad = post(template_server, chat_template="{% for %}")
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "template_error"
