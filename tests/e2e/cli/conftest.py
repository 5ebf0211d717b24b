"""Fixtures for driving the real `mlxd` entry point in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture
def cli_env(isolated_home: Path) -> dict[str, str]:
    """The environment for a child `mlxd`: isolated store and HF cache, offline."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


@pytest.fixture(scope="session")
def long_chat_model(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model with a 64k window: with --ignore-eos it answers for many seconds,
    long enough to interrupt or to outlive a closed pipe."""
    path = tmp_path_factory.mktemp("long") / "tiny-long"
    shutil.copytree(tiny_chat_model, path)
    for name, key in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        config = json.loads((path / name).read_text())
        config[key] = 1 << 16
        (path / name).write_text(json.dumps(config))
    return path
