"""health.check / check_runnable on good models and on each kind of breakage."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mlxd.errors import ModelBroken, ModelRefused
from mlxd.store import health
from mlxd.store.health import check, check_runnable
from tests.integration.store.cachefixture import (
    BREAKAGES,
    EXPECTED,
    break_model,
    materialize,
    place_in_cache,
)


@pytest.fixture
def model_copy(tmp_path: Path, tiny_chat_model: Path) -> Path:
    return Path(shutil.copytree(tiny_chat_model, tmp_path / "model"))


@pytest.mark.parametrize("fixture", ["tiny_chat_model", "tiny_base_model", "tiny_quant_model"])
def test_good_models_are_healthy(fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(fixture)
    report = check(path, deep=True)
    assert report.status == "ok", report.problems
    assert report.headers and report.headers[0].tensors
    check_runnable(path)


@pytest.mark.parametrize("how", BREAKAGES)
def test_each_breakage_is_reported(model_copy: Path, how: str) -> None:
    break_model(model_copy, how)
    report = check(model_copy)
    status, code = EXPECTED[how]
    assert report.status == status
    assert code in [p.code for p in report.problems]
    error = ModelRefused if status == "refused" else ModelBroken
    with pytest.raises(error) as info:
        check_runnable(model_copy)
    assert "\n" not in info.value.message
    if status == "broken":
        assert not isinstance(info.value, ModelRefused)


@pytest.mark.parametrize("how", ["auto_map", "model_file", "tokenizer_auto_map"])
def test_trust_remote_code_waives_code_refusals(model_copy: Path, how: str) -> None:
    break_model(model_copy, how)
    check_runnable(model_copy, trust_remote_code=True)


def test_trust_remote_code_does_not_waive_pickles(model_copy: Path) -> None:
    break_model(model_copy, "pickle_only")
    with pytest.raises(ModelRefused, match="pickle"):
        check_runnable(model_copy, trust_remote_code=True)


def test_several_problems_are_all_listed(model_copy: Path) -> None:
    break_model(model_copy, "truncated_shard")
    break_model(model_copy, "auto_map")
    break_model(model_copy, "no_tokenizer")
    codes = {p.code for p in check(model_copy).problems}
    assert {"bad_safetensors", "auto_map", "no_tokenizer"} <= codes


def test_partial_download_in_cache(hub_cache: Path, tiny_chat_model: Path) -> None:
    snapshot = place_in_cache(hub_cache, "org/partial", tiny_chat_model)
    assert check(snapshot).status == "ok"
    blobs = snapshot.parent.parent / "blobs"
    (blobs / "deadbeef.1234.incomplete").write_bytes(b"partial")
    report = check(snapshot)
    assert report.status == "incomplete"
    assert "mlxd pull org/partial" in report.problems[0].message
    with pytest.raises(ModelBroken, match="incomplete"):
        check_runnable(snapshot)


def test_missing_file_against_recorded_tree(hub_cache: Path, tiny_chat_model: Path) -> None:
    snapshot = place_in_cache(hub_cache, "org/partial", tiny_chat_model)
    trees = snapshot.parent.parent / "trees"
    trees.mkdir()
    listing = {"config.json": {"size": 1, "blob_id": "x"},
               "model-2.safetensors": {"size": 9, "blob_id": "y"},
               "modeling.py": {"size": 9, "blob_id": "z"}}  # fmt: skip
    tree = {"format_version": 1, "files": listing}
    (trees / f"{snapshot.name}.json").write_text(json.dumps(tree))
    report = check(snapshot)
    assert [p.code for p in report.problems] == ["missing_files"]  # *.py is never pulled
    assert "model-2.safetensors" in report.problems[0].message


def test_dangling_snapshot_link(hub_cache: Path, tiny_chat_model: Path) -> None:
    snapshot = place_in_cache(hub_cache, "org/dangling", tiny_chat_model)
    os.unlink(os.path.realpath(snapshot / "tokenizer.json"))
    codes = {p.code for p in check(snapshot).problems}
    assert "missing_blob" in codes


def test_corrupt_blob_behind_symlink(hub_cache: Path, tiny_chat_model: Path) -> None:
    snapshot = place_in_cache(hub_cache, "org/corrupt", tiny_chat_model)
    shard = materialize(snapshot, "model.safetensors")
    shard.write_bytes(shard.read_bytes()[:100])
    assert check(snapshot).status == "broken"


def test_unreadable_directory(model_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests may run as root, for whom chmod 000 changes nothing: simulate the denial.
    real_access = os.access
    monkeypatch.setattr(
        health.os, "access", lambda p, m: False if Path(p) == model_copy else real_access(p, m)
    )
    report = check(model_copy)
    assert [p.code for p in report.problems] == ["unreadable"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_unreadable_directory_real_permissions(model_copy: Path) -> None:
    model_copy.chmod(0)
    try:
        assert check(model_copy).status == "broken"
    finally:
        model_copy.chmod(0o755)


def test_not_a_directory(tmp_path: Path) -> None:
    assert check(tmp_path / "nope").problems[0].code == "missing"


def test_model_type_support_follows_mlx_lm() -> None:
    assert health.model_type_supported("llama")
    assert health.model_type_supported("mistral")  # via mlx-lm's remapping table
    assert not health.model_type_supported("no_such_architecture")


def test_deep_check_loads_the_tokenizer(model_copy: Path) -> None:
    (model_copy / "tokenizer.json").write_text('{"model": {"type": "Nonsense"}}')
    assert check(model_copy).status == "ok"  # fast check: valid JSON
    report = check(model_copy, deep=True)
    assert [p.code for p in report.problems] == ["bad_tokenizer"]
