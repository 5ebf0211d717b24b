"""How `mlxd run` shows reasoning and tool calls, on a scripted checkpoint whose greedy
output is a known sequence (tests/integration/chat/scripted.py): a real forward pass emits
<think>…</think>, text, then a Hermes <tool_call>."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD, one_json_line, run_mlxd
from tests.integration.chat.scripted import make_scripted_checkpoint

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
SCRIPT = ["<think>", "Let me see.", "</think>", "It is ", "sunny.", "<tool_call>", CALL,
          "</tool_call>"]  # fmt: skip
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_scripted_checkpoint(tmp_path_factory.mktemp("scripted") / "m", SCRIPT)


def test_json_has_reasoning_content_and_tool_call(scripted: Path, cli_env: dict) -> None:
    proc = run_mlxd("run", str(scripted), "Weather?", "--json", "--tools", json.dumps(TOOLS),
                    env=cli_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["reasoning"].strip() == "Let me see."
    assert body["content"].strip() == "It is sunny."
    assert body["finish_reason"] == "tool_calls"
    (call,) = body["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("hide", [False, True])
def test_terminal_rendering(scripted: Path, cli_env: dict, tmp_path: Path, hide: bool) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    extra = ["--hide-reasoning"] if hide else []
    proc = subprocess.run(
        [*MLXD, "run", str(scripted), "Weather?", "--tools", str(tools), *extra],
        capture_output=True, text=True, env=cli_env, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text, call_line = proc.stdout.strip().splitlines()
    assert text.strip() == "It is sunny."
    assert json.loads(call_line)["function"]["name"] == "get_weather"
    assert ("Let me see." in proc.stderr) is not hide
    assert "Let me see." not in proc.stdout


def test_bad_tools_value_is_one_line(scripted: Path, cli_env: dict) -> None:
    for value in ("[{", '[{"type": "function"}]', str(Path(os.devnull) / "missing.json")):
        proc = run_mlxd("run", str(scripted), "hi", "--tools", value, "--json", env=cli_env)
        assert proc.returncode == 2, proc.stderr
        assert one_json_line(proc.stderr)["error"]["param"].startswith("tools")
