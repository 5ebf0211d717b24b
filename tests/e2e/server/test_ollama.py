"""Ollama's API on a real `mlxd serve`, driven by the official `ollama` Python client and by
raw HTTP: chat (streamed and not), generate, tools, `format`, the model list, show, ps,
version, errors in Ollama's shape, the NDJSON stream's fields, and parity with /v1."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.e2e.server.conftest import FIM_MIDDLE
from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env, wait_for
from tests.json_schemas import check

USER = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "num_predict": 12}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "rank": {"type": "integer", "minimum": 1, "maximum": 99},
    },
    "required": ["city", "rank"],
    "additionalProperties": False,
}
DONE_FIELDS = {
    "model",
    "created_at",
    "done",
    "done_reason",
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
}
DURATIONS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


@pytest.fixture(scope="module")
def lama(server: ServerProcess) -> ollama.Client:
    return ollama.Client(host=server.url, timeout=120)


@pytest.fixture(scope="module")
def tagged(server: ServerProcess) -> str:
    """The served model's name as Ollama clients send it."""
    return server.model + ":latest"


def test_chat(lama: ollama.Client, tagged: str) -> None:
    r = lama.chat(model=tagged, messages=USER, options=GREEDY, stream=False)
    assert r.message.role == "assistant" and isinstance(r.message.content, str)
    assert r.done is True and r.done_reason in ("stop", "length")
    assert r.prompt_eval_count and r.prompt_eval_count > 0
    assert r.eval_count is not None and 0 < r.eval_count <= 12


def test_chat_streamed_equals_not_streamed(lama: ollama.Client, tagged: str) -> None:
    whole = lama.chat(model=tagged, messages=USER, options=GREEDY, stream=False)
    parts = list(lama.chat(model=tagged, messages=USER, options=GREEDY, stream=True))
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count
    assert parts[-1].done_reason == whole.done_reason


def test_num_predict_ends_with_length(lama: ollama.Client, tagged: str) -> None:
    opts = {"num_predict": 3, "temperature": 0}
    last = list(lama.chat(model=tagged, messages=USER, options=opts, stream=True))[-1]
    assert last.done_reason == "length" and last.eval_count == 3


def test_generate(lama: ollama.Client, tagged: str) -> None:
    r = lama.generate(model=tagged, prompt="Hello", system="Be terse.", options=GREEDY)
    assert r.done is True and isinstance(r.response, str) and r.eval_count
    raw = lama.generate(model=tagged, prompt="The capital of France is", raw=True, options=GREEDY)
    assert raw.done is True and raw.eval_count and raw.prompt_eval_count


def test_generate_streamed(lama: ollama.Client, tagged: str) -> None:
    whole = lama.generate(model=tagged, prompt="Hello", options=GREEDY)
    parts = list(lama.generate(model=tagged, prompt="Hello", options=GREEDY, stream=True))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert "".join(p.response for p in parts) == whole.response


def test_tool_calls_come_back_with_arguments_as_an_object(lama: ollama.Client) -> None:
    r = lama.chat(model="scripted", messages=USER, tools=[WEATHER], stream=False)
    calls = r.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert r.message.thinking == "Let me see."
    streamed = [c for p in lama.chat(model="scripted", messages=USER, tools=[WEATHER], stream=True)
                for c in p.message.tool_calls or []]  # fmt: skip
    assert [c.function.arguments for c in streamed] == [{"city": "Paris"}]


def test_a_tool_result_goes_back_to_the_model(lama: ollama.Client) -> None:
    history = [
        *USER,
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
    ]  # fmt: skip
    r = lama.chat(model="scripted", messages=history, tools=[WEATHER], stream=False)
    assert r.done is True


def test_format_schema_streamed_gives_valid_json(lama: ollama.Client, tagged: str) -> None:
    parts = lama.chat(
        model=tagged,
        messages=USER,
        format=SCHEMA,
        think=False,
        options={"num_predict": 200},
        stream=True,
    )
    check(json.loads("".join(p.message.content or "" for p in parts)), SCHEMA)


def test_format_json_and_schema_not_streamed(lama: ollama.Client, tagged: str) -> None:
    r = lama.chat(
        model=tagged,
        messages=USER,
        format=SCHEMA,
        think=False,
        options={"num_predict": 200},
        stream=False,
    )
    check(json.loads(r.message.content or ""), SCHEMA)
    j = lama.generate(model=tagged, prompt="JSON please", format="json", think=False,
                      options={"num_predict": 200}, stream=False)  # fmt: skip
    assert isinstance(json.loads(j.response), dict)


def test_list_show_ps_version(lama: ollama.Client, tagged: str) -> None:
    names = [m.model for m in lama.list().models]
    assert names[0] == tagged and "scripted:latest" in names
    shown = lama.show(tagged)
    assert shown.details is not None and shown.details.family == "llama"
    assert "completion" in (shown.capabilities or [])
    assert any(k.endswith(".context_length") for k in shown.modelinfo or {})
    assert tagged in [m.model for m in lama.ps().models]
    version = httpx.get(lama._client.base_url.join("/api/version")).json()  # type: ignore[attr-defined]
    assert isinstance(version["version"], str) and version["mlxd"]


def test_errors_in_ollama_shape(lama: ollama.Client, server: ServerProcess) -> None:
    with pytest.raises(ollama.ResponseError) as unknown:
        lama.chat(model="no-such-model:7b", messages=USER, stream=False)
    assert unknown.value.status_code == 404 and "no-such-model:7b" in unknown.value.error
    with pytest.raises(ollama.ResponseError) as pull:
        lama.pull("llama3.2")
    assert pull.value.status_code == 501 and "mlxd pull" in pull.value.error
    bad = httpx.post(server.url + "/api/chat", content=b'{"model": 3}')
    assert bad.status_code == 400 and set(bad.json()) == {"error"}
    fim = httpx.post(server.url + "/api/generate",
                     json={"model": "default", "prompt": "a", "suffix": "b"})  # fmt: skip
    assert fim.status_code == 400 and "fill-in-the-middle" in fim.json()["error"]
    duration = httpx.post(server.url + "/api/generate",
                          json={"model": "default", "keep_alive": "5 parsecs"})  # fmt: skip
    assert duration.status_code == 400 and "keep_alive" in duration.json()["error"]
    opt = httpx.post(server.url + "/api/chat", json={
        "model": "default", "messages": USER, "options": {"temperature": -1}})  # fmt: skip
    assert opt.status_code == 400 and "options.temperature" in opt.json()["error"]
    schema = httpx.post(server.url + "/api/chat", json={
        "model": "default", "messages": USER, "format": {"type": "strin"}})  # fmt: skip
    assert schema.status_code == 400 and "format" in schema.json()["error"]
    for path, body in (("/api/embed", {"input": "x"}), ("/api/embeddings", {"prompt": "x"})):
        r = httpx.post(server.url + path, json={"model": "default", **body})
        assert r.status_code == 400 and "not an embedding model" in r.json()["error"]


def test_ndjson_fields_done_and_durations(server: ServerProcess) -> None:
    body = {"model": "default", "messages": USER, "options": GREEDY}
    with httpx.stream("POST", server.url + "/api/chat", json=body, timeout=120) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in r.iter_lines() if line]
    *parts, last = lines
    for part in parts:
        assert part["done"] is False and set(part) == {"model", "created_at", "message", "done"}
    assert DONE_FIELDS | {"message"} == set(last) and last["done"] is True
    assert all(isinstance(last[k], int) and last[k] >= 0 for k in DURATIONS)
    assert last["total_duration"] >= last["prompt_eval_duration"] + last["eval_duration"]
    assert last["eval_count"] >= 1 and last["prompt_eval_count"] >= 1


def test_a_request_without_messages_loads_the_model(server: ServerProcess) -> None:
    r = httpx.post(server.url + "/api/chat", json={"model": "default", "messages": []})
    assert r.json()["done"] is True and r.json()["done_reason"] == "load"


def test_chat_greedy_equals_chat_completions(
    lama: ollama.Client, client: openai.OpenAI, tagged: str
) -> None:
    system = {"role": "system", "content": "You are terse."}
    ours = lama.chat(model=tagged, messages=[system, *USER], options=GREEDY, stream=False)
    theirs = client.chat.completions.create(
        model=tagged.removesuffix(":latest"),
        messages=[system, *USER],  # type: ignore[list-item]
        temperature=0,
        max_tokens=12,
    )
    assert ours.message.content == (theirs.choices[0].message.content or "")
    assert ours.eval_count == (theirs.usage.completion_tokens if theirs.usage else None)


@pytest.mark.demo
def test_demo_model_format_schema_gives_valid_json(tmp_path: Path) -> None:
    srv = launch([], server_env(tmp_path))
    try:
        lama = ollama.Client(host=srv.url, timeout=600)
        r = lama.chat(
            model=srv.model + ":latest",
            messages=[{"role": "user", "content": "Name a city and its rank, as JSON."}],
            format=SCHEMA,
            options={"temperature": 0, "num_predict": 60},
            stream=False,
        )
        assert r.done_reason == "stop"
        check(json.loads(r.message.content or ""), SCHEMA)
    finally:
        assert srv.stop(timeout=120) == 0


def test_disconnect_mid_stream_cancels(server: ServerProcess, http: httpx.Client) -> None:
    cancelled = 'mlxd_requests_finished_total{reason="cancelled"}'
    before = metric(http.get("/../metrics").text, cancelled)
    long = {"model": "tiny-long", "messages": USER,
            "options": {"num_predict": 30000, "ignore_eos": True}}  # fmt: skip
    with httpx.stream("POST", server.url + "/api/chat", json=long, timeout=120) as r:
        lines = r.iter_lines()
        assert [json.loads(next(lines))["done"] for _ in range(3)] == [False] * 3
    wait_for(lambda: metric(http.get("/../metrics").text, "mlxd_running_requests") == 0, "idle")
    assert metric(http.get("/../metrics").text, cancelled) == before + 1


def test_api_key_host_origin_and_alias(tiny_chat_model: Path, server_home: Path) -> None:
    port = free_port()  # --ollama-port: the same server on a second port, checks and all
    args = ["--model", str(tiny_chat_model), "--api-key", "s3cret", "--alias", "llama3.2*=default",
            "--ollama-port", str(port)]  # fmt: skip
    srv = launch(args, server_env(server_home))
    second = f"http://127.0.0.1:{port}"
    try:
        assert f"Ollama clients on {second}" in "".join(srv.stderr)
        assert httpx.get(second + "/api/tags").status_code == 401
        on_second = ollama.Client(host=second, headers={"Authorization": "Bearer s3cret"})
        assert srv.model + ":latest" in [m.model for m in on_second.list().models]
        foreign = httpx.get(second + "/api/tags", headers={
            "Authorization": "Bearer s3cret", "Origin": "http://evil.example"})  # fmt: skip
        assert foreign.status_code == 403
        body = {"model": "default", "messages": USER, "options": {"num_predict": 2}}
        anon = httpx.post(srv.url + "/api/chat", json=body)
        assert anon.status_code == 401 and set(anon.json()) == {"error"}
        keyed = ollama.Client(host=srv.url, headers={"Authorization": "Bearer s3cret"})
        assert keyed.chat(model="default", messages=USER, options={"num_predict": 2}).done
        aliased = keyed.chat(model="llama3.2:3b", messages=USER, options={"num_predict": 2})
        assert aliased.model == srv.model  # --alias maps a name:tag onto the preloaded model
        auth = {"Authorization": "Bearer s3cret"}
        evil = httpx.post(srv.url + "/api/chat", json=body,
                          headers={**auth, "Origin": "http://evil.example"})  # fmt: skip
        assert evil.status_code == 403 and set(evil.json()) == {"error"}
        rebound = httpx.get(srv.url + "/api/tags", headers={**auth, "Host": "evil.example"})
        assert rebound.status_code == 403
    finally:
        assert srv.stop() == 0


def test_suffix_fills_in_the_middle_on_a_model_with_fim_tokens(lama: ollama.Client) -> None:
    r = lama.generate(model="scripted-fim", prompt="def add(a, b):\n", suffix="\n", stream=False)
    assert r.response == FIM_MIDDLE and r.done_reason == "stop"
    assert r.prompt_eval_count is not None and r.prompt_eval_count >= 3  # the three FIM tokens


def test_keep_alive_zero_unloads_and_a_duration_keeps(lama: ollama.Client) -> None:
    lama.chat(model="scripted-think", messages=USER, keep_alive="10m", stream=False)
    assert "scripted-think:latest" in resident(lama)
    gone = lama.generate(model="scripted-think", keep_alive=0)
    assert gone.done_reason == "unload"
    wait_for(lambda: "scripted-think:latest" not in resident(lama), "the unload")
    # a model that is not loaded is not loaded to be unloaded
    assert lama.generate(model="scripted-think", keep_alive=0).done_reason == "unload"
    assert "scripted-think:latest" not in resident(lama)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resident(lama: ollama.Client) -> list[str | None]:
    return [m.model for m in lama.ps().models]
