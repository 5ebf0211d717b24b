"""`mlxd run --server URL` against a real `mlxd serve`: the same answers as in-process and as
the server's own API (greedy parity), the same rendering of reasoning and tool calls, stdin,
MLXD_SERVER and --local, errors as one line with their exit codes, and a start-up path that
imports neither mlx nor the engine."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.e2e.cli.remote import KEY, WEATHER_TOOL
from tests.e2e.cli.serve_helper import free_port
from tests.e2e.cli.test_parity import REQUESTS, cli_args, messages
from tests.e2e.cli.test_startup import RECORD_IMPORTS
from tests.e2e.server.serverproc import ServerProcess


def remote_run(server: ServerProcess, env: dict[str, str], *args: str, input: str | None = None):
    return run_mlxd("run", "--server", server.url, "--api-key", KEY, *args, env=env, input=input)


def answer(proc) -> dict:  # noqa: ANN001
    assert proc.returncode == 0, proc.stderr
    return one_json_line(proc.stdout)


@pytest.mark.parametrize("request_", REQUESTS, ids=["system", "unicode"])
def test_run_json_equals_in_process_and_the_server(
    remote: ServerProcess, remote_env: dict[str, str], tiny_chat_model: Path, request_: dict
) -> None:
    args = (*cli_args(request_), "--json")
    over_http = answer(remote_run(remote, remote_env, *args))
    local = answer(run_mlxd("run", str(tiny_chat_model), *args, env=remote_env))
    client = openai.OpenAI(base_url=remote.base_url, api_key=KEY, max_retries=0)
    reply = client.chat.completions.create(
        model="default",
        messages=messages(request_),
        max_tokens=request_["max_tokens"],
        temperature=0,
    )
    assert over_http["content"] == local["content"] == reply.choices[0].message.content
    assert over_http["finish_reason"] == local["finish_reason"] == reply.choices[0].finish_reason
    for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
        assert over_http["usage"][key] == local["usage"][key]
    assert over_http["model"] == tiny_chat_model.name == reply.model
    timings = over_http["timings"]  # the client's own measurements; the engine's are null
    assert timings["queued_s"] is None and timings["draft_tokens"] is None
    assert 0 < timings["ttft_s"] <= timings["total_s"]
    assert local["timings"]["queued_s"] is not None


def test_reasoning_and_tool_calls_render_as_in_process(
    remote: ServerProcess, remote_env: dict[str, str], remote_home: Path
) -> None:
    """A model that thinks, writes text and calls a tool: the same --json answer and the
    same terminal output (text and tool call on stdout, reasoning on stderr)."""
    tools = ("Weather?", "--tools", json.dumps([WEATHER_TOOL]))
    local_model = str(remote_home / "mlxd" / "models" / "scripted")

    def ask(where: str, *args: str):  # noqa: ANN202
        if where == "http":
            return remote_run(remote, remote_env, "scripted", *tools, *args)
        return run_mlxd("run", local_model, *tools, *args, env=remote_env)

    bodies = [answer(ask(where, "--json")) for where in ("http", "local")]
    for body in bodies:
        for call in body["tool_calls"]:
            call.pop("id")  # a fresh id per answer
        body.pop("model"), body.pop("timings")
    assert bodies[0] == bodies[1]
    assert bodies[0]["reasoning"] == "Let me see." and bodies[0]["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in bodies[0]["tool_calls"]] == ["get_weather"]
    shown = [ask(where) for where in ("http", "local")]
    hidden = [ask(where, "--hide-reasoning", "--no-stream") for where in ("http", "local")]
    for proc in shown + hidden:
        assert proc.returncode == 0, proc.stderr
    assert all("Let me see." in p.stderr for p in shown)
    assert not any("Let me see." in p.stderr for p in hidden)
    streamed = [_without_ids(p.stdout) for p in shown + hidden]
    assert len(set(streamed)) == 1 and "get_weather" in streamed[0]


def _without_ids(stdout: str) -> str:
    lines = [json.loads(x) if x.startswith("{") else x for x in stdout.splitlines()]
    return "\n".join(
        json.dumps({k: v for k, v in x.items() if k != "id"}) if isinstance(x, dict) else x
        for x in lines
    )


def test_stdin_and_the_environment(
    remote: ServerProcess, remote_env: dict[str, str], tiny_chat_model: Path
) -> None:
    """`-` reads stdin as in-process; MLXD_SERVER and MLXD_API_KEY stand for the flags, and
    --local loads the model here even then."""
    args = ("-", "summarize", "this", "--max-tokens", "8", "--temperature", "0", "--json")
    notes = "notes here: the meeting moved to Tuesday\n"
    over_http = answer(remote_run(remote, remote_env, *args, input=notes))
    local = answer(run_mlxd("run", str(tiny_chat_model), *args, env=remote_env, input=notes))
    assert over_http["content"] == local["content"]
    assert over_http["usage"]["prompt_tokens"] == local["usage"]["prompt_tokens"]
    env = remote_env | {"MLXD_SERVER": remote.url + "/v1", "MLXD_API_KEY": KEY}
    by_env = answer(run_mlxd("run", *args, env=env, input=notes))
    assert by_env["content"] == local["content"] and by_env["timings"]["queued_s"] is None
    here = answer(run_mlxd("run", "--local", str(tiny_chat_model), *args, env=env, input=notes))
    assert here["content"] == local["content"] and here["timings"]["queued_s"] is not None


def test_positional_model_is_the_servers(remote: ServerProcess, remote_env: dict[str, str]) -> None:
    """The first word is the model when the server lists it; else the prompt (one word) or
    an error (more words), as in-process with the store."""
    named = answer(remote_run(remote, remote_env, "tiny-long", "hi", "--max-tokens", "2", "--json"))
    assert named["model"] == "tiny-long"
    one_word = answer(remote_run(remote, remote_env, "hello", "--max-tokens", "2", "--json"))
    assert one_word["model"] == "tiny-chat"  # the server's default model
    typo = remote_run(remote, remote_env, "tiny-lon", "hi", "there")
    assert typo.returncode == 3 and "quote the whole prompt" in typo.stderr


def _png(path: Path) -> Path:
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 30, 30)).save(path)
    return path


@pytest.mark.parametrize("json_mode", [False, True], ids=["line", "json"])
def test_errors_are_one_line_with_their_exit_code(
    remote: ServerProcess, remote_env: dict[str, str], tmp_path: Path, json_mode: bool
) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}"
    long_prompt = "Paris " * 200  # more than tiny-short's 96-token window
    cases = [
        (["--server", unreachable, "hi"], 5, "unavailable", "cannot reach"),
        (["--server", remote.url, "hi"], 8, "invalid_api_key", "--api-key KEY or MLXD_API_KEY"),
        (["--server", remote.url, "--api-key", "wrong", "hi"], 8, "invalid_api_key", "API key"),
        (["--server", remote.url, "--api-key", KEY, "-m", "nosuch", "hi"], 3, "model_not_found",
         "nosuch"),
        (["--server", remote.url, "--api-key", KEY, "tiny-short", long_prompt], 2,
         "context_length_exceeded", "context"),
        (["--server", remote.url, "--api-key", KEY, "--image", str(_png(tmp_path / "a.png")),
          "what is it?"], 2, "invalid_request", "image"),
        (["--server", remote.url, "--draft-model", "x", "hi"], 2, "invalid_request",
         "--draft-model"),
        (["--server", "ftp://x", "hi"], 2, "invalid_request", "--server"),
    ]  # fmt: skip
    for args, code, error_code, words in cases:
        proc = run_mlxd("run", *args, *(["--json"] if json_mode else []), env=remote_env)
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stdout == "" and "Traceback" not in proc.stderr
        if json_mode:
            error = one_json_line(proc.stderr)["error"]
            assert error["code"] == error_code and words.lower() in error["message"].lower()
        else:
            [line] = proc.stderr.splitlines()
            assert line.startswith("mlxd: error: ") and words.lower() in line.lower(), line
    assert answer(remote_run(remote, remote_env, "hi", "--max-tokens", "2", "--json"))


def test_server_path_imports_no_mlx(
    remote: ServerProcess, remote_env: dict[str, str], tmp_path: Path
) -> None:
    """The start-up of `run --server` is a bare client: no mlx, engine, store or tokenizer."""
    import subprocess
    import sys

    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", RECORD_IMPORTS, str(out), "run", "--server", remote.url,
         "--api-key", KEY, "hi", "--max-tokens", "2"],
        capture_output=True, text=True, env=remote_env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(out.read_text()))
    assert "mlxd.cli.client.http_model" in modules and "mlxd.chat.options" in modules
    heavy = ("mlx", "mlx_lm", "numpy", "transformers", "tokenizers", "jinja2", "httpx",
             "huggingface_hub", "safetensors", "fastapi", "prompt_toolkit", "rich")  # fmt: skip
    assert not {m for m in modules if m.split(".")[0] in heavy}
    layers = ("mlxd.engine", "mlxd.backend", "mlxd.store", "mlxd.server")
    assert not {m for m in modules if m.startswith(layers)}
