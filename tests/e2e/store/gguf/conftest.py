"""Fixtures for driving the real `mlxd import` entry point."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.store.gguf.gguf_builder import build_gguf


@pytest.fixture(scope="session")
def cli_gguf(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Q8_0 llama GGUF (general.name "Tiny Llama Test")."""
    return build_gguf(
        tiny_chat_model, tmp_path_factory.mktemp("cli-gguf") / "tiny.gguf", "Q8_0"
    ).path


@pytest.fixture
def import_env(isolated_home: Path) -> dict[str, str]:
    """The environment for a child `mlxd`: isolated store and HF cache, offline."""
    return dict(os.environ)
