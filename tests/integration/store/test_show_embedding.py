"""`mlxd show` on embedding models: an `embedding` line (vector length, pooling, normalizing;
nomic-bert's layer norm before a cut) in place of `kv per token`, which means nothing for a
model that keeps no KV (null in --json); a chat model keeps its kv line and no embedding."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.cli.store_cmds import _print_description
from mlxd.store.inspect import ModelDescription, describe
from mlxd.store.model_ref import ModelRef
from tests.hf_encoder_checkpoints import make_nomic


def _describe(path: Path) -> ModelDescription:
    return describe(ModelRef(name=path.name, path=path, source="path", revision=None))


def _fields(out: str) -> dict[str, str]:
    return {line[:15].strip(): line[16:] for line in out.splitlines() if line[:15].strip()}


def test_embedding_models_show_their_vectors_not_kv(
    tiny_encoder_model: Path,
    tiny_decoder_embedding_model: Path,
    tiny_chat_model: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = {
        tiny_encoder_model: ("64 dimensions, cls pooling, normalized", "cls", False),
        tiny_decoder_embedding_model: ("64 dimensions, last pooling, normalized", "last", False),
        make_nomic(tmp_path / "nomic"): (
            "32 dimensions, mean pooling, normalized, layer norm before a dimensions cut",
            "mean",
            True,
        ),
    }
    for path, (line, pooling, layer_norm_cut) in expected.items():
        info = _describe(path)
        assert info.kind == "embedding" and info.kv_bytes_per_token is None
        body = info.to_dict()
        assert body["kv_bytes_per_token"] is None
        dims = int(line.split()[0])
        assert body["embedding"] == {
            "dimensions": dims,
            "pooling": pooling,
            "normalize": True,
            "layer_norm_cut": layer_norm_cut,
        }
        _print_description(info, files=False, config=False)
        shown = _fields(capsys.readouterr().out)
        assert shown["embedding"] == line and "kv per token" not in shown
    chat = _describe(tiny_chat_model)
    assert chat.to_dict()["embedding"] is None and chat.kv_bytes_per_token
    _print_description(chat, files=False, config=False)
    shown = _fields(capsys.readouterr().out)
    assert "embedding" not in shown and shown["kv per token"].startswith("full ")
