"""`mlxd run --json-schema FILE|JSON`, `--json-mode` and `--tool-choice` through the real
entry point on the tiny random checkpoint: the answer is JSON valid against the schema (a
forced call's arguments against its tool's), whatever the weights."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd
from tests.json_schemas import check

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 12},
        "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
        "genres": {"type": "array", "items": {"enum": ["drama", "comedy"]}, "maxItems": 2},
    },
    "required": ["title", "year", "genres"],
    "additionalProperties": False,
}
ASK = ("Name a film.", "--no-think", "--max-tokens", "300")


def test_json_schema_inline_and_from_a_file_print_the_same_valid_json(
    tiny_chat_model: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    inline = run_mlxd("run", str(tiny_chat_model), *ASK, "--json-schema", json.dumps(SCHEMA),
                      env=cli_env)  # fmt: skip
    assert inline.returncode == 0, inline.stderr
    check(json.loads(inline.stdout), SCHEMA)
    path = tmp_path / "film.schema.json"
    path.write_text(json.dumps(SCHEMA, indent=2))
    from_file = run_mlxd("run", str(tiny_chat_model), *ASK, "--json-schema", str(path),
                         "--json", env=cli_env)  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr
    body = one_json_line(from_file.stdout)
    assert body["finish_reason"] == "stop"
    assert body["content"] + "\n" == inline.stdout


def test_json_mode_prints_a_json_object(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd("run", str(tiny_chat_model), "Hi.", "--no-think", "--json-mode",
                    "--max-tokens", "600", "--json", env=cli_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["finish_reason"] == "stop" and isinstance(json.loads(body["content"]), dict)


def test_a_bad_schema_is_one_line_and_exit_2(
    tiny_chat_model: Path, cli_env: dict[str, str]
) -> None:
    proc = run_mlxd("run", str(tiny_chat_model), "Hi.", "--json-schema", '{"type": "strin"}',
                    env=cli_env)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "response_format" in lines[0] and "strin" in lines[0]


def test_flag_errors_fail_before_loading(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    both = run_mlxd("run", str(tiny_chat_model), "Hi.", "--json-mode", "--json-schema", "{}",
                    env=cli_env)  # fmt: skip
    assert both.returncode == 2 and "not allowed with" in both.stderr
    missing = run_mlxd("run", str(tiny_chat_model), "Hi.", "--json-schema", "/no/such.json",
                       env=cli_env)  # fmt: skip
    assert missing.returncode == 2 and "cannot read /no/such.json" in missing.stderr
    listed = run_mlxd("run", str(tiny_chat_model), "Hi.", "--json-schema", "[1]", env=cli_env)
    assert listed.returncode == 2 and "JSON object" in listed.stderr


TOOLS = [
    {"type": "function", "function": {"name": "film", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "clock"}},
]


def test_tool_choice_forces_a_valid_call(tiny_chat_model: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd("run", str(tiny_chat_model), *ASK, "--tools", json.dumps(TOOLS),
                    "--tool-choice", "film", "--json", env=cli_env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = one_json_line(proc.stdout)
    assert body["finish_reason"] == "tool_calls" and body["content"] == ""
    (call,) = body["tool_calls"]
    assert call["function"]["name"] == "film"
    check(json.loads(call["function"]["arguments"]), SCHEMA)


def test_a_tool_choice_the_tools_cannot_meet_fails_before_generating(
    tiny_chat_model: Path, cli_env: dict[str, str]
) -> None:
    for extra in (["--tool-choice", "required"], ["--tools", json.dumps(TOOLS), "--tool-choice",
                                                  "nosuch"]):  # fmt: skip
        proc = run_mlxd("run", str(tiny_chat_model), "Hi.", *extra, "--json", env=cli_env)
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert one_json_line(proc.stderr)["error"]["param"] == "tool_choice"
