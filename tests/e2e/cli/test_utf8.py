"""Bytes that are not UTF-8, in arguments or on stdin: one error line (JSON with --json),
exit 2, never a traceback. Both ways Python may decode stdin are tried: surrogateescape (C and
C.UTF-8 locales) and strict (PYTHONIOENCODING=utf-8:strict, like most UTF-8 locales)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import MLXD

BAD = b"caf\xe9 \xff"  # Latin-1, not UTF-8
DECODINGS = {"surrogateescape": {}, "strict": {"PYTHONIOENCODING": "utf-8:strict"}}


def mlxd_bytes(
    args: list[bytes | str], env: dict[str, str], stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    argv = [a.encode() if isinstance(a, str) else a for a in [*MLXD, *args]]
    return subprocess.run(
        argv,
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=env,
        timeout=120,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[bytes], json_mode: bool) -> str:
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    if json_mode:
        message = json.loads(lines[0])["error"]["message"]
    else:
        assert lines[0].startswith("mlxd: error: ")
        message = lines[0]
    assert "UTF-8" in message
    return message


CASES = {
    "run-argument": (["run", "{model}", b"hello " + BAD], None),
    "run-system": (["run", "{model}", "hello", "--system", BAD], None),
    "run-stdin": (["run", "{model}", "-"], b"hello " + BAD),
    "run-piped-stdin": (["run", "{model}"], b"hello " + BAD),
    "chat-system": (["chat", "{model}", "--system", BAD], b"hello\n"),
    "chat-stdin": (["chat", "{model}"], b"hello " + BAD + b"\n"),
}


@pytest.mark.parametrize("decoding", sorted(DECODINGS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_utf8_is_one_error_line(
    tiny_chat_model: Path, cli_env: dict[str, str], case: str, decoding: str
) -> None:
    template, stdin = CASES[case]
    args = [str(tiny_chat_model) if a == "{model}" else a for a in template]
    env = {**cli_env, **DECODINGS[decoding]}
    assert_one_line_error(mlxd_bytes(args, env, stdin), json_mode=False)
    if args[0] == "run":
        message = assert_one_line_error(mlxd_bytes([*args, "--json"], env, stdin), True)
        assert "0xe9" in message  # names the first offending byte
