"""Importer fixtures: tiny llama GGUF files built once per session from the tiny checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.store.gguf.gguf_builder import BuiltGguf, GgufFactory, build_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tiny_chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> GgufFactory:
    """`tiny_gguf(qtype="F32", **options)` -> a cached BuiltGguf for those arguments."""
    folder = tmp_path_factory.mktemp("gguf")
    built: dict[tuple, BuiltGguf] = {}

    def make(qtype: str = "F32", **options: object) -> BuiltGguf:
        key = (qtype, *sorted(options.items()))
        if key not in built:
            out = folder / f"tiny-{len(built)}-{qtype}.gguf"
            built[key] = build_gguf(tiny_chat_model, out, qtype, **options)  # type: ignore[arg-type]
        return built[key]

    return make


@pytest.fixture
def store(isolated_home: Path) -> Path:
    """mlxd's store directory under the isolated MLXD_HOME (created by the import)."""
    return isolated_home / "mlxd" / "models"
