"""`mlxd embed` through the real entry point: one JSON vector per line, --json, stdin,
--dimensions; the same vectors as the engine's embedding path in this process; `mlxd list`
and `show` report the kind `embedding`; a chat model and a bad request fail as one line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from mlxd.chat.embedding import EmbedInput, start_embedding
from mlxd.engine import Engine, EngineConfig
from tests.e2e.cli.cli_helpers import one_json_line, run_mlxd

TEXTS = ["The capital of France is Paris.", "hello"]


@pytest.fixture(params=["tiny_encoder_model", "tiny_decoder_embedding_model"])
def model(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


def test_json_lines_and_json_agree_with_the_engine(model: Path, cli_env: dict[str, str]) -> None:
    lines = run_mlxd("embed", str(model), *TEXTS, env=cli_env)
    assert lines.returncode == 0, lines.stderr
    vectors = [json.loads(line) for line in lines.stdout.splitlines()]
    body = run_mlxd("embed", str(model), *TEXTS, "--json", env=cli_env)
    assert body.returncode == 0, body.stderr
    whole = one_json_line(body.stdout)
    assert whole["dimensions"] == 64 and whole["embeddings"] == vectors
    with Engine(EngineConfig.from_settings(max_batch=1)) as engine:
        info = engine.load_model(model)
        direct = start_embedding(engine, info, EmbedInput(TEXTS)).result(60)
    assert whole["prompt_tokens"] == direct.prompt_tokens
    for cli, here in zip(vectors, direct.vectors, strict=True):
        assert max(abs(a - b) for a, b in zip(cli, here, strict=True)) <= 1e-5


def test_stdin_and_dimensions(tiny_encoder_model: Path, cli_env: dict[str, str]) -> None:
    proc = run_mlxd(
        "embed", str(tiny_encoder_model), "-", "--dimensions", "8", env=cli_env, input="hello\n"
    )
    assert proc.returncode == 0, proc.stderr
    (vector,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(vector) == 8 and math.isclose(
        math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5
    )
    again = run_mlxd("embed", str(tiny_encoder_model), "hello", "--dimensions", "8", env=cli_env)
    assert json.loads(again.stdout) == vector


def test_errors_are_one_line(
    tiny_encoder_model: Path, tiny_chat_model: Path, cli_env: dict[str, str]
) -> None:
    chat = run_mlxd("embed", str(tiny_chat_model), "hi", env=cli_env)
    assert chat.returncode != 0 and "is not an embedding model" in chat.stderr
    assert len(chat.stderr.strip().splitlines()) == 1
    wide = run_mlxd("embed", str(tiny_encoder_model), "hi", "--dimensions", "65", env=cli_env)
    assert wide.returncode != 0 and "dimensions must be between 1 and 64" in wide.stderr
    run = run_mlxd("run", str(tiny_encoder_model), "hi", env=cli_env)
    assert run.returncode != 0 and "serves embeddings" in run.stderr


def test_list_and_show_report_the_embedding_kind(
    tiny_encoder_model: Path, tiny_decoder_embedding_model: Path, cli_env: dict[str, str]
) -> None:
    from tests.hf_encoder_checkpoints import make_nomic, make_roberta

    store = Path(cli_env["MLXD_HOME"]) / "models"
    shutil.copytree(tiny_encoder_model, store / "bge-tiny")
    shutil.copytree(tiny_decoder_embedding_model, store / "qwen3-embed-tiny")
    make_nomic(store / "nomic-tiny")  # nomic's auto_map included: never run, not refused
    make_roberta(store / "roberta-tiny")
    names = ("bge-tiny", "qwen3-embed-tiny", "nomic-tiny", "roberta-tiny")
    listed = run_mlxd("list", "--json", env=cli_env)
    assert listed.returncode == 0, listed.stderr
    kinds = {m["id"]: m["kind"] for m in json.loads(listed.stdout)}
    assert [kinds[n] for n in names] == ["embedding"] * 4
    for name in ("bge-tiny", "nomic-tiny"):
        shown = run_mlxd("show", name, "--json", env=cli_env)
        assert shown.returncode == 0 and json.loads(shown.stdout)["kind"] == "embedding"
    for name in names:
        health = run_mlxd("health", name, env=cli_env)
        assert health.returncode == 0, health.stdout + health.stderr


def test_qwen_s_flat_layout_is_healthy_and_embeds(tmp_path: Path, cli_env: dict[str, str]) -> None:
    from tests.embedding_checkpoints import make_decoder

    flat = make_decoder(tmp_path / "flat", flat=True)
    health = run_mlxd("health", str(flat), env=cli_env)
    assert health.returncode == 0, health.stdout + health.stderr
    proc = run_mlxd("embed", str(flat), "hello", env=cli_env)
    assert proc.returncode == 0 and len(json.loads(proc.stdout)) == 64
