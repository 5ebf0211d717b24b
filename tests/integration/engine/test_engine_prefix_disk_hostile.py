"""The disk tier in a hostile directory: it touches only the files it wrote (no link followed,
a folder holding other files refused at start), and a forged file (its digest's name, our
metadata, a KV array reshaped to the same byte count) is a cache miss: deleted, counted, and
its request served as if nothing were cached."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlxd.backend.prefix.disk_tier import fingerprint
from mlxd.errors import InvalidRequest
from tests.hostile import forge_snapshot
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_prefix_disk import USERS, ask, files, turns


def victims(folder: Path, count: int = 3, size: int = 256 << 10) -> list[Path]:
    """Files the tier did not write, each larger than the budgets below."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:064x}.safetensors" for i in range(count)]
    for path in paths:
        path.write_bytes(b"\1" * size)
    return paths


def test_a_linked_subfolder_is_never_counted_or_evicted(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    root, outside = tmp_path / "cache", tmp_path / "outside"
    first = make_engine(prefix_cache_dir=str(root))
    turns(first, first.load_model(tiny_hybrid_model), USERS[:1])
    first.close()
    budget = 2 * sum(p.stat().st_size for p in files(root))
    kept = victims(outside)
    (root / "elsewhere").symlink_to(outside, target_is_directory=True)
    engine = make_engine(prefix_cache_dir=str(root), prefix_cache_disk_bytes=budget)
    info = engine.load_model(tiny_hybrid_model)
    for i in range(3):
        turns(engine, info, [f"Conversation {i}. {USERS[i]}"])
    assert all(path.exists() for path in kept)
    assert sum(p.stat().st_size for p in files(root) if p.parent.name != "elsewhere") <= budget


def test_a_linked_fingerprint_folder_is_never_read_written_or_emptied(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    root, outside = tmp_path / "cache", tmp_path / "outside"
    first = make_engine(prefix_cache_dir=str(root))
    history = turns(first, first.load_model(tiny_hybrid_model), USERS[:2])
    first.close()
    folder = root / fingerprint(tiny_hybrid_model)
    shutil.move(folder, outside)  # the folder's files, by the names the tier recorded...
    kept = {path: path.read_bytes() for path in outside.iterdir()}
    for path in kept:  # ... made unreadable as caches: the old tier deleted such files
        path.write_bytes(b"junk")
    kept = {path: path.read_bytes() for path in outside.iterdir()}
    folder.symlink_to(outside, target_is_directory=True)
    engine = make_engine(prefix_cache_dir=str(root), prefix_cache_disk_bytes=1)
    info = engine.load_model(tiny_hybrid_model)
    content, usage = ask(engine, info, [*history, {"role": "user", "content": USERS[2]}])
    assert {path: path.read_bytes() for path in outside.iterdir()} == kept  # nothing added
    assert usage.cached_tokens == 0


def test_a_folder_of_checkpoints_is_refused_at_start(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    shutil.copytree(tiny_hybrid_model, models / "tiny")
    before = {p: p.read_bytes() for p in (models / "tiny").iterdir()}
    with pytest.raises(InvalidRequest, match="holds 'tiny', which mlxd did not write"):
        make_engine(prefix_cache_dir=str(models), prefix_cache_disk_bytes=1)
    assert {p: p.read_bytes() for p in (models / "tiny").iterdir()} == before
    empty = tmp_path / "empty"
    empty.mkdir()
    make_engine(prefix_cache_dir=str(empty)).load_model(tiny_hybrid_model)  # empty: taken


@pytest.mark.parametrize("kind", ["chat", "sliding", "hybrid"])
def test_its_own_files_check_after_a_restart(
    kind: str, make_engine: EngineFactory, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    model = request.getfixturevalue(f"tiny_{kind}_model")
    first = make_engine(prefix_cache_dir=str(tmp_path))
    history = turns(first, first.load_model(model), USERS[:2])
    first.close()
    again = make_engine(prefix_cache_dir=str(tmp_path))
    _, usage = ask(again, again.load_model(model), history[:-1])
    assert usage.cached_tokens > 0
    assert again.stats().cache.files_rejected == 0


def test_a_forged_file_is_a_miss_deleted_and_counted(
    make_engine: EngineFactory, tiny_hybrid_model: Path, tmp_path: Path
) -> None:
    first = make_engine(prefix_cache_dir=str(tmp_path))
    history = turns(first, first.load_model(tiny_hybrid_model), USERS[:2])
    first.close()
    forged = [forge_snapshot(path) for path in files(tmp_path)]
    engine = make_engine(prefix_cache_dir=str(tmp_path))
    info = engine.load_model(tiny_hybrid_model)
    messages = [*history, {"role": "user", "content": USERS[2]}]
    content, usage = ask(engine, info, messages)
    cold = make_engine(prefix_cache_bytes=0)
    assert content == ask(cold, cold.load_model(tiny_hybrid_model), messages)[0]
    assert usage.cached_tokens == 0
    rejected = engine.stats().cache.files_rejected
    assert rejected >= 1 and sum(not path.exists() for path in forged) == rejected
    assert ask(engine, info, messages)[0] == content  # and again: the files are gone
