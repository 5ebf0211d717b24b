"""`mlxd show` on a DFlash drafter (issue 27): it is runnable as a --draft-model (no
tokenizer of its own), and says what target it was made for; other checkpoints say nothing."""

from __future__ import annotations

from pathlib import Path

from mlxd.store.inspect import describe
from mlxd.store.model_ref import ModelRef
from tests.dflash_checkpoints import make_dflash_drafter, make_qwen3_target


def _describe(path: Path):
    return describe(ModelRef(name=path.name, path=path, source="path", revision=None))


def test_show_names_a_dflash_drafter(tiny_chat_model: Path, tmp_path: Path) -> None:
    target = make_qwen3_target(tmp_path / "qwen3")
    info = _describe(make_dflash_drafter(tmp_path / "qwen3-dflash", target))
    assert info.runnable and info.health.status == "ok", info.health.problems
    assert info.dflash is not None
    assert "hidden size 64" in info.dflash and "layers [0, 1]" in info.dflash
    assert info.to_dict()["dflash_drafter"] == info.dflash
    assert _describe(tiny_chat_model).dflash is None
