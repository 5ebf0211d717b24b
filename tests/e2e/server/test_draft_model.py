"""`mlxd serve --draft-model`: the draft is resolved through the store, loaded with --model,
named in the start-up line, /v1/models and /health; greedy answers are the same with and
without it; an unknown draft or one with another vocabulary is refused at start-up (one
line, no traceback); draft_kind=model on a server without a draft is a 400, then the next
request is served. Real `mlxd serve` processes, the official openai client."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.server.serverproc import ServerProcess, launch, metric, server_env

QUESTION = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}]


@pytest.fixture(scope="module")
def draft_home(tmp_path_factory: pytest.TempPathFactory, tiny_draft_model: Path) -> Path:
    home = tmp_path_factory.mktemp("draft-home")
    shutil.copytree(tiny_draft_model, home / "mlxd" / "models" / "tiny-draft")
    return home


@pytest.fixture(scope="module")
def drafting(tiny_chat_model: Path, draft_home: Path) -> Iterator[ServerProcess]:
    args = ["--model", str(tiny_chat_model), "--draft-model", "tiny-draft"]
    srv = launch([*args, "--num-draft-tokens", "3"], server_env(draft_home))
    yield srv
    srv.stop()


def test_draft_is_named_in_startup_line_models_and_health(drafting: ServerProcess) -> None:
    expected = {
        "model": "tiny-draft",
        "kind": "model",
        "num_draft_tokens": 3,
        "kv_bytes_per_token": 512,
    }
    assert any("(draft tiny-draft, model, 3 tokens)" in line for line in drafting.stderr)
    models = httpx.get(drafting.base_url + "/models").json()["data"]
    assert models[0]["id"] == "tiny-chat" and models[0]["draft"] == expected
    assert httpx.get(drafting.base_url + "/models/tiny-chat").json()["draft"] == expected
    assert httpx.get(drafting.url + "/health").json()["draft"] == expected


def test_greedy_answers_equal_with_and_without_the_draft(drafting: ServerProcess) -> None:
    import openai

    client = openai.OpenAI(base_url=drafting.base_url, api_key="x", max_retries=0, timeout=120)

    def answer(**extra: object) -> str:
        done = client.chat.completions.create(
            model="tiny-chat", messages=QUESTION, max_tokens=24, temperature=0, extra_body=extra
        )
        return done.choices[0].message.content or ""

    before = metric(httpx.get(drafting.url + "/metrics").text, "mlxd_draft_tokens_total")
    speculated = answer()  # the server's default: the draft model
    text = httpx.get(drafting.url + "/metrics").text
    drafted = metric(text, "mlxd_draft_tokens_total")
    assert drafted > before
    by_kind = 'mlxd_draft_tokens_by_kind_total{kind="model"}'
    assert metric(text, by_kind) == drafted  # the one kind that drafted here
    assert metric(text, 'mlxd_draft_tokens_by_kind_total{kind="mtp"}') == 0
    assert "mlxd_speculation_parked_steps_total " in text
    assert answer(draft_kind="none") == speculated
    assert answer(draft_kind="model", num_draft_tokens=1) == speculated


def _start_failure(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "mlxd.cli.main", "serve", "--port", "0", *args]
    return subprocess.run(
        cmd, env=server_env(home), capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.parametrize("case", ["unknown", "vocabulary", "kind-without-draft"])
def test_bad_draft_refuses_to_start(
    case: str, tiny_chat_model: Path, tiny_foreign_vocab_model: Path, draft_home: Path
) -> None:
    extra = {
        "unknown": ["--draft-model", "no-such-draft"],
        "vocabulary": ["--draft-model", str(tiny_foreign_vocab_model)],
        "kind-without-draft": ["--draft-kind", "model"],
    }[case]
    done = _start_failure(["--model", str(tiny_chat_model), *extra], draft_home)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    word = {"unknown": "no-such-draft", "vocabulary": "vocabulary", "kind-without-draft": "draft"}
    assert word[case] in lines[0]
    if case == "vocabulary":
        assert "tiny-chat-400" in lines[0] and "tiny-chat" in lines[0]


def test_model_kind_without_a_draft_is_400_then_served(http: httpx.Client) -> None:
    body = {"model": "default", "messages": QUESTION, "max_tokens": 4}
    refused = http.post("/chat/completions", json={**body, "draft_kind": "model"})
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "draft_kind"
    assert http.post("/chat/completions", json=body).status_code == 200
