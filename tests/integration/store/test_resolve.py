"""resolve(): every reference form, ambiguity and not-found, on a real cache layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.errors import AmbiguousModel, InvalidRequest, ModelNotFound
from mlxd.store.resolve import resolve
from tests.integration.store.cachefixture import place_in_cache, place_in_store

OTHER = "b" * 40


@pytest.fixture
def populated(hub_cache: Path, store: Path, tiny_chat_model: Path, tiny_base_model: Path) -> Path:
    place_in_cache(hub_cache, "mlx-community/Tiny-Chat-4bit", tiny_chat_model)
    place_in_cache(hub_cache, "mlx-community/Tiny-Chat-4bit", tiny_base_model, OTHER, "v2")
    place_in_cache(hub_cache, "acme/base-model", tiny_base_model)
    place_in_store(store, "imported-one", tiny_chat_model)
    return hub_cache


def test_org_name_resolves_to_main_snapshot(populated: Path) -> None:
    ref = resolve("mlx-community/Tiny-Chat-4bit")
    assert ref.source == "hf" and ref.name == "mlx-community/Tiny-Chat-4bit"
    assert ref.revision == "a" * 40
    folder = populated / "models--mlx-community--Tiny-Chat-4bit"
    assert ref.path == folder / "snapshots" / ref.revision
    assert (ref.path / "config.json").is_file()


@pytest.mark.parametrize("rev", ["v2", OTHER, OTHER[:10]])
def test_org_name_at_revision(populated: Path, rev: str) -> None:
    ref = resolve(f"mlx-community/Tiny-Chat-4bit@{rev}")
    assert ref.revision == OTHER and ref.path.name == OTHER


def test_unknown_revision_is_not_found(populated: Path) -> None:
    with pytest.raises(ModelNotFound, match="mlxd pull mlx-community/Tiny-Chat-4bit@nope"):
        resolve("mlx-community/Tiny-Chat-4bit@nope")


@pytest.mark.parametrize(
    ("short", "expected"),
    [("tiny-chat", "mlx-community/Tiny-Chat-4bit"), ("BASE-MO", "acme/base-model")],
)
def test_unique_fuzzy_short_name(populated: Path, short: str, expected: str) -> None:
    assert resolve(short).name == expected


def test_store_name_and_fuzzy_store_name(populated: Path, store: Path) -> None:
    assert resolve("imported-one").source == "store"
    assert resolve("imported-one").path == store / "imported-one"
    assert resolve("IMPORTED").name == "imported-one"


def test_ambiguous_lists_candidates(populated: Path) -> None:
    with pytest.raises(AmbiguousModel) as info:
        resolve("o")  # in every name
    message = info.value.message
    for name in ("mlx-community/Tiny-Chat-4bit", "acme/base-model", "imported-one"):
        assert name in message


def test_not_found_suggests_pull(populated: Path) -> None:
    with pytest.raises(ModelNotFound, match="try `mlxd pull org/missing`") as info:
        resolve("org/missing")
    assert not isinstance(info.value, AmbiguousModel)
    with pytest.raises(ModelNotFound, match="mlxd pull"):
        resolve("zzz")


def test_directory_paths(populated: Path, tiny_chat_model: Path, monkeypatch) -> None:
    ref = resolve(str(tiny_chat_model))
    assert ref.source == "path" and ref.path == tiny_chat_model.resolve()
    monkeypatch.chdir(tiny_chat_model.parent)
    assert resolve(f"./{tiny_chat_model.name}").path == tiny_chat_model.resolve()
    assert resolve(tiny_chat_model.name).source == "path"  # an existing relative directory
    with pytest.raises(ModelNotFound, match="not found"):
        resolve("./no-such-dir")
    with pytest.raises(ModelNotFound, match="not a model directory"):
        resolve(str(tiny_chat_model / "config.json"))


def test_hf_cache_env_vars_are_read_at_call_time(
    populated: Path, tmp_path: Path, monkeypatch, tiny_chat_model: Path
) -> None:
    other = tmp_path / "elsewhere"
    place_in_cache(other, "zeta/only-here", tiny_chat_model)
    monkeypatch.setenv("HF_HUB_CACHE", str(other))
    assert resolve("zeta/only-here").path.is_relative_to(other)
    with pytest.raises(ModelNotFound):
        resolve("acme/base-model")


@pytest.mark.parametrize("bad", ["", "  ", "name@", "@rev"])
def test_malformed_references(populated: Path, bad: str) -> None:
    with pytest.raises(InvalidRequest):
        resolve(bad)
