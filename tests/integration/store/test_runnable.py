"""runnable_model: resolve, then check, the one path before every Engine.load_model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mlxd.errors import ModelNotFound, ModelRefused
from mlxd.store.model_ref import ModelRef
from mlxd.store.runnable import runnable_model
from tests.integration.store.cachefixture import break_model


def test_a_store_name_resolves_and_passes_the_check(store: Path, tiny_chat_model: Path) -> None:
    shutil.copytree(tiny_chat_model, store / "tiny")
    ref = runnable_model("tiny", store_only=True)
    assert (ref.name, ref.source, ref.path) == ("tiny", "store", store / "tiny")


def test_a_refused_model_fails_before_any_load(store: Path, tiny_chat_model: Path) -> None:
    shutil.copytree(tiny_chat_model, store / "coded")
    break_model(store / "coded", "auto_map")
    with pytest.raises(ModelRefused):
        runnable_model("coded")
    given = ModelRef("coded", store / "coded", "store")  # already resolved: checked all the same
    with pytest.raises(ModelRefused):
        runnable_model(given)
    assert runnable_model(given, trust_remote_code=True) == given


def test_store_only_refuses_a_directory_without_naming_where_it_is(
    isolated_home: Path, tiny_chat_model: Path
) -> None:
    assert runnable_model(str(tiny_chat_model)).source == "path"
    with pytest.raises(ModelNotFound, match="not in the store") as err:
        runnable_model(str(tiny_chat_model), store_only=True)
    assert err.value.param == "model"
    with pytest.raises(ModelNotFound) as err:
        runnable_model(ModelRef(str(tiny_chat_model), tiny_chat_model, "path"), store_only=True)
    assert str(tiny_chat_model.parent) not in err.value.message
