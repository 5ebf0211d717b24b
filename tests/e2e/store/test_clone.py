"""The real `mlxd clone`: a cached model copied as plain files (no link into the cache),
health-checked, runnable and editable; a non-empty directory is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.errors import InvalidRequest, ModelBroken, ModelNotFound
from tests.integration.store.cachefixture import break_model, place_in_cache
from tests.integration.store.clirun import mlxd


@pytest.fixture
def home(tmp_path: Path, tiny_chat_model: Path) -> Path:
    place_in_cache(tmp_path / "hf" / "hub", "org/tiny-chat", tiny_chat_model)
    return tmp_path


def test_clone_is_plain_files_that_run(home: Path, tiny_chat_model: Path) -> None:
    copy = home / "work" / "tiny"
    result = mlxd(home, "clone", "org/tiny-chat", str(copy), "--json")
    assert result.code == 0, result.stderr
    made = result.json()
    assert made["source"] == "org/tiny-chat" and made["path"] == str(copy)
    files = sorted(p for p in copy.rglob("*"))
    assert files and not any(p.is_symlink() for p in files)
    assert {p.name: p.read_bytes() for p in files} == {
        p.name: p.read_bytes() for p in tiny_chat_model.iterdir() if p.is_file()
    }
    assert made["files"] == len(files) and made["bytes"] == sum(p.stat().st_size for p in files)
    assert mlxd(home, "health", str(copy)).code == 0
    edited = copy / "generation_config.json"  # editing the copy leaves the cache as it was
    edited.write_text('{"do_sample": false, "max_new_tokens": 3}')
    cached = next((home / "hf" / "hub").glob("models--org--tiny-chat/snapshots/*"))
    assert (cached / edited.name).read_bytes() == (tiny_chat_model / edited.name).read_bytes()
    answer = mlxd(home, "run", str(copy), "hi", "--max-tokens", "3", "--json")
    assert answer.code == 0, answer.stderr
    assert not list(copy.parent.glob(".tiny.clone-*"))


def test_clone_into_an_empty_directory(home: Path) -> None:
    empty = home / "empty"
    empty.mkdir()
    assert mlxd(home, "clone", "tiny-chat", str(empty)).code == 0
    assert (empty / "config.json").is_file()


def test_clone_refuses_a_non_empty_directory(home: Path) -> None:
    busy = home / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = mlxd(home, "clone", "org/tiny-chat", str(busy), "--json")
    assert result.code == InvalidRequest.exit_code
    assert "not empty" in result.error()["message"]
    assert [p.name for p in busy.iterdir()] == ["notes.txt"]
    file = home / "a-file"
    file.write_text("x")
    assert mlxd(home, "clone", "org/tiny-chat", str(file)).code == InvalidRequest.exit_code


def test_clone_refuses_missing_and_broken_models(home: Path) -> None:
    missing = mlxd(home, "clone", "org/none", str(home / "x"), "--json")
    assert missing.code == ModelNotFound.exit_code
    snapshot = next((home / "hf" / "hub").glob("models--org--tiny-chat/snapshots/*"))
    break_model(snapshot, "truncated_shard")
    broken = mlxd(home, "clone", "org/tiny-chat", str(home / "y"), "--json")
    assert broken.code == ModelBroken.exit_code, broken.stderr
    assert not (home / "y").exists()
