"""`mlxd run/chat --draft-model`: the same answer as without it (greedy), the draft's tokens in
run --json timings, and a bad draft (unknown, another vocabulary) as one line on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd

PROMPT = (
    "The quick brown fox jumps over the lazy dog.",
    "--max-tokens",
    "24",
    "--temperature",
    "0",
)


def test_run_with_a_draft_model_answers_the_same(
    tiny_chat_model: Path, tiny_draft_model: Path, cli_env: dict[str, str]
) -> None:
    plain = run_mlxd("run", str(tiny_chat_model), *PROMPT, "--json", env=cli_env)
    drafted = run_mlxd(
        "run", str(tiny_chat_model), *PROMPT, "--json", "--draft-model", str(tiny_draft_model),
        env=cli_env,
    )  # fmt: skip
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    a, b = one_json_line(plain.stdout), one_json_line(drafted.stdout)
    assert b["content"] == a["content"]
    assert a["timings"]["draft_tokens"] == 0 and b["timings"]["draft_tokens"] > 0


def test_chat_with_a_draft_model_answers_the_same(
    tiny_chat_model: Path, tiny_draft_model: Path, cli_env: dict[str, str]
) -> None:
    args = ("chat", str(tiny_chat_model), "--max-tokens", "16", "--temperature", "0")
    plain = run_mlxd(*args, env=cli_env, input="hello\nand again\n")
    drafted = run_mlxd(
        *args, "--draft-model", str(tiny_draft_model), env=cli_env, input="hello\nand again\n"
    )
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    assert drafted.stdout == plain.stdout


@pytest.mark.parametrize("case", ["unknown", "vocabulary"])
def test_bad_draft_model_is_one_line(
    case: str,
    tiny_chat_model: Path,
    tiny_foreign_vocab_model: Path,
    cli_env: dict[str, str],
) -> None:
    draft = "no-such-draft" if case == "unknown" else str(tiny_foreign_vocab_model)
    proc = run_mlxd("run", str(tiny_chat_model), "hi", "--draft-model", draft, env=cli_env)
    assert proc.returncode == (3 if case == "unknown" else 2), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "draft model" in proc.stderr
    if case == "vocabulary":
        assert "tiny-chat-400" in proc.stderr and "vocabulary of tiny-chat" in proc.stderr
