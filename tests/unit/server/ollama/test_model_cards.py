"""/api/show of an embedding model served by path (no catalog entry): the loaded model's kind
gives the `embedding` capability, and model_info its vector length and llama.cpp's pooling."""

from __future__ import annotations

import json
from pathlib import Path

from mlxd.engine import ModelInfo
from mlxd.server.ollama.model_cards import ModelFacts, show_body
from mlxd.types import ModelKind

ST = "sentence_transformers.models."


def test_an_embedding_model_served_by_path_shows_as_one(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 48}))
    modules = [{"idx": 0, "path": "", "type": ST + "Transformer"}]
    modules.append({"idx": 1, "path": "1_Pooling", "type": ST + "Pooling"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    info = ModelInfo("bge", tmp_path, None, 512, kind=ModelKind.EMBEDDING)  # type: ignore[arg-type]
    body = show_body(ModelFacts.of("bge", None, info))
    assert body["capabilities"] == ["embedding"]
    assert body["model_info"] == {
        "general.architecture": "bert",
        "bert.context_length": 512,
        "bert.embedding_length": 48,
        "bert.pooling_type": 1,  # llama.cpp's mean
    }
    chat = ModelInfo("chat", tmp_path, None, 512)  # type: ignore[arg-type]
    assert show_body(ModelFacts.of("chat", None, chat))["capabilities"] == ["completion"]
