"""Store fixtures: an isolated HF cache and mlxd store, with tiny models placed in them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def hub_cache(isolated_home: Path) -> Path:
    cache = isolated_home / "hf" / "hub"
    cache.mkdir(parents=True)
    return cache


@pytest.fixture
def store(isolated_home: Path) -> Path:
    path = isolated_home / "mlxd" / "models"
    path.mkdir(parents=True)
    return path
