"""Fixtures for driving the real `mlxd` entry point in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.e2e.cli.cli_helpers import SRC

if TYPE_CHECKING:
    from tests.e2e.server.serverproc import ServerProcess


@pytest.fixture
def cli_env(isolated_home: Path) -> dict[str, str]:
    """The environment for a child `mlxd`: isolated store and HF cache, offline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC
    return env


def with_window(source: Path, target: Path, window: int) -> Path:
    """A copy of a checkpoint whose context window is `window` tokens."""
    shutil.copytree(source, target)
    for name, key in (
        ("config.json", "max_position_embeddings"),
        ("tokenizer_config.json", "model_max_length"),
    ):
        config = json.loads((target / name).read_text())
        config[key] = window
        (target / name).write_text(json.dumps(config))
    return target


@pytest.fixture(scope="session")
def long_chat_model(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model with a 64k window: with --ignore-eos it answers for many seconds,
    long enough to interrupt or to outlive a closed pipe."""
    return with_window(tiny_chat_model, tmp_path_factory.mktemp("long") / "tiny-long", 1 << 16)


@pytest.fixture(scope="session")
def short_chat_model(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model with a 96-token window, to see the budget end at the window."""
    return with_window(tiny_chat_model, tmp_path_factory.mktemp("short") / "tiny-short", 96)


@pytest.fixture(scope="package")
def remote_home(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.e2e.cli.remote import make_home

    return make_home(tmp_path_factory.mktemp("remote-home"), tiny_chat_model)


@pytest.fixture(scope="package")
def remote_env(remote_home: Path) -> dict[str, str]:
    from tests.e2e.cli.remote import client_env

    return client_env(remote_home)


@pytest.fixture(scope="package")
def remote(tiny_chat_model: Path, remote_env: dict[str, str]) -> Iterator[ServerProcess]:
    """One `mlxd serve --model tiny-chat --api-key KEY` for the `--server` tests."""
    from tests.e2e.cli.remote import KEY
    from tests.e2e.server.serverproc import launch

    server = launch(["--model", str(tiny_chat_model), "--api-key", KEY], remote_env)
    yield server
    server.stop()
