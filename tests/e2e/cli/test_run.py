"""`mlxd run` through the real entry point on a tiny checkpoint: streaming, --no-stream,
--json, stdin, pipes closed early, and every error path as one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD, one_json_line, run_mlxd
from tests.signals import default_sigint


def answer_json(model: Path, env: dict[str, str], *args: str, input: str | None = None) -> dict:
    proc = run_mlxd("run", str(model), *args, "--json", env=env, input=input)
    assert proc.returncode == 0, proc.stderr
    return one_json_line(proc.stdout)


def test_json_streamed_and_unstreamed_agree(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    args = ("What is the capital of France?", "--max-tokens", "12")
    body = answer_json(tiny_chat_model, cli_env, *args)
    assert set(body) >= {
        "model",
        "content",
        "reasoning",
        "tool_calls",
        "finish_reason",
        "usage",
        "timings",
    }
    assert body["finish_reason"] in ("stop", "length", "tool_calls")
    usage = body["usage"]
    assert 1 <= usage["completion_tokens"] <= 12
    assert usage["prompt_tokens"] > 2
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert body["timings"]["total_s"] >= body["timings"]["ttft_s"] >= 0

    streamed = run_mlxd("run", str(tiny_chat_model), *args, env=cli_env)
    once = run_mlxd("run", str(tiny_chat_model), *args, "--no-stream", env=cli_env)
    assert streamed.returncode == once.returncode == 0, streamed.stderr + once.stderr
    assert streamed.stdout == once.stdout
    assert streamed.stderr == once.stderr  # reasoning and warnings, if any
    if not body["tool_calls"]:
        assert streamed.stdout == body["content"] + ("" if body["content"].endswith("\n") else "\n")

    system = answer_json(tiny_chat_model, cli_env, *args, "--system", "You are terse.")
    assert system["usage"]["prompt_tokens"] > usage["prompt_tokens"]


def test_budget_defaults_to_the_rest_of_the_window(
    short_chat_model: Path, cli_env: dict[str, str]
) -> None:
    body = answer_json(short_chat_model, cli_env, "Hello", "--ignore-eos")
    usage = body["usage"]
    assert body["finish_reason"] == "length"
    assert usage["prompt_tokens"] + usage["completion_tokens"] == 96


def test_stdin_dash_and_piped_prompt(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    args = ("--max-tokens", "10")
    dashed = answer_json(
        tiny_chat_model, cli_env, "-", "summarize", "this", *args, input="notes here\n"
    )
    # `-` reads stdin and appends the words after a blank line: the same prompt as piping it
    piped = answer_json(tiny_chat_model, cli_env, *args, input="notes here\n\nsummarize this")
    assert dashed["usage"]["prompt_tokens"] == piped["usage"]["prompt_tokens"]
    assert dashed["content"] == piped["content"]


@pytest.mark.parametrize("head", ["head -1", "head -c 3"])
def test_closed_pipe_exits_quietly(
    long_chat_model: Path, cli_env: dict[str, str], head: str
) -> None:
    cmd = (
        " ".join(MLXD)
        + f" run {long_chat_model} 'Hello' --ignore-eos --max-tokens 200 --hide-reasoning"
    )
    proc = subprocess.run(
        ["bash", "-c", f'{cmd} | {head} >/dev/null; echo "${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=120,
    )
    assert proc.stdout.strip() == "0", proc.stderr
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr


def test_unknown_model_is_one_line(isolated_home: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd("run", "no-such-model", "hello", env=cli_env)
    assert proc.returncode == 3
    assert len(proc.stderr.splitlines()) == 1 and "no-such-model" in proc.stderr
    proc = run_mlxd("run", str(isolated_home / "absent"), "hi", "--json", env=cli_env)
    assert proc.returncode == 3 and proc.stdout == ""
    assert one_json_line(proc.stderr)["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--temperature", "abc"),
        ("--temperature", "nan"),
        ("--temperature", "5"),
        ("--top-k", "-1"),
        ("--max-tokens", "0"),
        ("--logit-bias", "[1]"),
        ("--bogus", "1"),
    ],
)
@pytest.mark.parametrize("json_mode", [False, True])
def test_bad_flag_value_is_one_line(
    tiny_chat_model: Path, cli_env: dict[str, str], flag: str, value: str, json_mode: bool
) -> None:
    extra = ["--json"] if json_mode else []
    proc = run_mlxd("run", str(tiny_chat_model), "hi", flag, value, *extra, env=cli_env)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    if json_mode:
        error = one_json_line(proc.stderr)["error"]
        assert error["type"] == "invalid_request_error"


def test_model_with_remote_code_is_refused(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    import shutil

    model = tmp_path / "remote"
    shutil.copytree(tiny_chat_model, model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.Model"}
    (model / "config.json").write_text(json.dumps(config))
    proc = run_mlxd("run", str(model), "hi", "--json", env=cli_env)
    assert proc.returncode == 4
    assert one_json_line(proc.stderr)["error"]["code"] == "model_refused"


def test_ctrl_c_stops_run_with_one_line(long_chat_model: Path, cli_env: dict[str, str]) -> None:
    import signal

    proc = subprocess.Popen(
        [*MLXD, "run", str(long_chat_model), "Hello", "--ignore-eos", "--max-tokens", "60000",
         "--hide-reasoning"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=cli_env,
        preexec_fn=default_sigint,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.read(1)  # the answer is streaming
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.decode().splitlines()[-1] == "mlxd: error: interrupted"
    assert "Traceback" not in err.decode()
