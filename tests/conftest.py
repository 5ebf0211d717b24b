"""Shared fixtures: tiny checkpoints built once per session, an isolated HF cache and store."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkpoints import make_checkpoint


@pytest.fixture(scope="session")
def checkpoints_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_chat_model(checkpoints_dir: Path) -> Path:
    """ChatML template with <think> and Hermes tool calls; float32 llama, ~100k params."""
    return make_checkpoint(checkpoints_dir / "tiny-chat", "chat")


@pytest.fixture(scope="session")
def tiny_base_model(checkpoints_dir: Path) -> Path:
    """No chat template."""
    return make_checkpoint(checkpoints_dir / "tiny-base", "base")


@pytest.fixture(scope="session")
def tiny_quant_model(checkpoints_dir: Path) -> Path:
    """4-bit affine-quantized weights."""
    return make_checkpoint(checkpoints_dir / "tiny-quant", "quant")


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Empty HF cache and mlxd store; nothing reaches the network."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("MLXD_HOME", str(tmp_path / "mlxd"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return tmp_path
