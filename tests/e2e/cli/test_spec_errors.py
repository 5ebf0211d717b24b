"""Bad speculation flags on the real CLI: one line on stderr and a non-zero exit, a JSON error
on stderr with --json; nothing on stdout; `serve` refuses them before it listens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import run_mlxd

BAD_FLAGS = {
    "k-zero": (["--num-draft-tokens", "0"], "num_draft_tokens"),
    "k-17": (["--num-draft-tokens", "17"], "num_draft_tokens"),
    "k-text": (["--num-draft-tokens", "x"], "--num-draft-tokens"),
    "k-negative": (["--num-draft-tokens=-1"], "num_draft_tokens"),
    "unknown-kind": (["--draft-kind", "eagle"], "--draft-kind"),
    "model-kind-without-draft": (["--draft-kind", "model"], "draft"),
    "dflash-kind-without-draft": (["--draft-kind", "dflash"], "draft"),
}


@pytest.mark.parametrize(("flags", "named"), BAD_FLAGS.values(), ids=BAD_FLAGS.keys())
def test_run_refuses_bad_speculation_flags(
    tiny_chat_model: Path, cli_env: dict[str, str], flags: list[str], named: str
) -> None:
    proc = run_mlxd("run", str(tiny_chat_model), "hi", "--max-tokens", "2", *flags, env=cli_env)
    assert proc.returncode not in (0, None) and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlxd: error: ") and named in lines[0]
    as_json = run_mlxd(
        "run", str(tiny_chat_model), "hi", "--max-tokens", "2", "--json", *flags, env=cli_env
    )
    assert as_json.returncode == proc.returncode and as_json.stdout == ""
    error = json.loads(as_json.stderr)["error"]
    assert error["type"] == "invalid_request_error" and named in error["message"]


@pytest.mark.parametrize(
    "flags", [["--num-draft-tokens", "17"], ["--draft-kind", "eagle"], ["--draft-kind", "dflash"]]
)
def test_serve_refuses_bad_speculation_flags(
    tiny_chat_model: Path, cli_env: dict[str, str], flags: list[str]
) -> None:
    proc = run_mlxd("serve", "--model", str(tiny_chat_model), "--port", "0", *flags, env=cli_env)
    assert proc.returncode not in (0, None)
    assert len(proc.stderr.splitlines()) == 1 and "draft" in proc.stderr
