"""The server's ServedModels hands out a model only with an engine reservation, even when the
engine pushes the model out again right after loading it (a fake engine; the real one is in
tests/integration/engine/test_engine_resident_models.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlxd import errors as E
from mlxd.engine import ModelInfo
from mlxd.server.served_models import LOAD_ATTEMPTS, ServedModels
from mlxd.store.model_ref import ModelRef


class PushyEngine:
    """Loads a model, but the first `pushed_out` loads are unloaded again at once (as by a
    concurrent load past max_models)."""

    def __init__(self, pushed_out: int) -> None:
        self.pushed_out = pushed_out
        self.loads = 0
        self.loaded: set[str] = set()
        self.reserved: list[str] = []

    def load_model(self, ref: ModelRef) -> ModelInfo:
        self.loads += 1
        if self.loads > self.pushed_out:
            self.loaded.add(ref.name)
        return ModelInfo(name=ref.name, path=ref.path, tokenizer=None, context_window=64)

    def reserve(self, name: str) -> ModelInfo:
        if name not in self.loaded:
            raise E.ModelNotFound(f"model {name!r} is not loaded")
        self.reserved.append(name)
        return ModelInfo(name=name, path=Path(name), tokenizer=None, context_window=64)


@pytest.fixture
def store_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import mlxd.store.health
    import mlxd.store.resolve

    monkeypatch.setattr(
        mlxd.store.resolve, "resolve", lambda name: ModelRef(name, tmp_path / name, "store")
    )
    monkeypatch.setattr(mlxd.store.health, "check_runnable", lambda path, **kw: None)


@pytest.mark.parametrize("pushed_out", range(LOAD_ATTEMPTS))
def test_server_models_reserve_after_every_load(store_model: None, pushed_out: int) -> None:
    engine = PushyEngine(pushed_out)
    info = asyncio.run(ServedModels(engine, default=None).get("m"))
    assert info.name == "m"
    assert engine.loads == pushed_out + 1
    assert engine.reserved == ["m"]  # the model handed out is reserved


def test_server_models_give_up_when_always_pushed_out(store_model: None) -> None:
    engine = PushyEngine(pushed_out=LOAD_ATTEMPTS)
    with pytest.raises(E.EngineBusy):
        asyncio.run(ServedModels(engine, default=None).get("m"))
    assert engine.loads == LOAD_ATTEMPTS and engine.reserved == []
