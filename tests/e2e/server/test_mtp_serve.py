"""`mlxd serve --draft-kind mtp` (issue 27): the checkpoint's MTP head (an mtp.safetensors
beside it) is named in the start-up line, /v1/models and /health; greedy answers are the same
with and without it, and /metrics counts its drafts by kind; on a checkpoint without a head
the server refuses to start in one line. Real `mlxd serve` processes, the openai client."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env

QUESTION = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}]
HEAD = {"model": "mtp head", "kind": "mtp", "num_draft_tokens": 3, "kv_bytes_per_token": 256}


@pytest.fixture(scope="module")
def mtp_server(
    tiny_mtp_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("mtp-home")
    args = ["--model", str(tiny_mtp_model), "--draft-kind", "mtp", "--num-draft-tokens", "3"]
    srv = launch(args, server_env(home))
    yield srv
    srv.stop()


def test_head_is_named_and_greedy_answers_match(mtp_server: ServerProcess) -> None:
    import openai

    assert any("(draft mtp head, mtp, 3 tokens)" in line for line in mtp_server.stderr)
    models = httpx.get(mtp_server.base_url + "/models").json()["data"]
    assert models[0]["draft"] == HEAD
    assert httpx.get(mtp_server.url + "/health").json()["draft"] == HEAD
    client = openai.OpenAI(base_url=mtp_server.base_url, api_key="x", max_retries=0, timeout=120)

    def answer(**extra: object) -> str:
        done = client.chat.completions.create(
            model="tiny-mtp", messages=QUESTION, max_tokens=24, temperature=0, extra_body=extra
        )
        return done.choices[0].message.content or ""

    speculated = answer()  # the server's default kind: mtp
    text = httpx.get(mtp_server.url + "/metrics").text
    assert metric(text, 'mlxd_draft_tokens_by_kind_total{kind="mtp"}') > 0
    assert answer(draft_kind="none") == speculated
    assert answer(draft_kind="mtp", num_draft_tokens=1) == speculated


def test_mtp_without_a_head_refuses_to_start(tiny_chat_model: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "mlxd.cli.main", "serve", "--port", "0",
           "--model", str(tiny_chat_model), "--draft-kind", "mtp"]  # fmt: skip
    done = subprocess.run(
        cmd, env=server_env(tmp_path), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "carries no MTP head" in lines[0]
