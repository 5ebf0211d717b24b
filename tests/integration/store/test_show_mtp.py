"""`mlxd show` says whether a checkpoint carries a usable MTP head (issue 27), from the
safetensors headers only: none, an mtp.safetensors beside the weights that fits, one whose
fc does not fit the hidden size."""

from __future__ import annotations

from pathlib import Path

from mlxd.store.inspect import describe
from mlxd.store.model_ref import ModelRef
from tests.mtp_checkpoints import copy_with_head


def _show(path: Path) -> str | None:
    return describe(ModelRef(name=path.name, path=path, source="path", revision=None)).mtp_head


def test_show_names_the_head(tiny_chat_model: Path, tiny_mtp_model: Path, tmp_path: Path):
    assert _show(tiny_chat_model) is None
    line = _show(tiny_mtp_model)
    assert line is not None and line.startswith("mtp.safetensors:") and "usable" in line
    misfit = copy_with_head(tiny_chat_model, tmp_path / "misfit", shapes={"mtp.fc.weight": (8, 8)})
    line = _show(misfit)
    assert line is not None and "fc is [8, 8]" in line and "wants [64, 128]" in line
    info = describe(ModelRef(name="m", path=tiny_mtp_model, source="path", revision=None))
    assert info.to_dict()["mtp_head"] == _show(tiny_mtp_model)


def test_show_names_a_next_token_layer(tmp_path: Path) -> None:
    """The DeepSeek-V3 / GLM layout: the head's tensors at model.layers.<num_hidden_layers>
    inside the checkpoint's own safetensors, or in an mtp.safetensors with those names."""
    from tests.mtp_checkpoints import make_nextn_checkpoint

    line = _show(make_nextn_checkpoint(tmp_path / "glm"))
    assert line is not None and line.startswith("model.layers.2.* in the checkpoint")
    assert "usable" in line
    line = _show(make_nextn_checkpoint(tmp_path / "ds", "deepseek_v3", sidecar=True))
    assert line is not None and line.startswith("mtp.safetensors:") and "usable" in line
