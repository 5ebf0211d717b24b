"""Engine.resident() on real tiny checkpoints (what `mlxd ps` shows): a chat model and an
embedding model side by side, each with its kind and its weights' bytes as loaded."""

from __future__ import annotations

from pathlib import Path

from mlxd.engine import EmbedRequest
from mlxd.types import ModelKind
from tests.integration.engine.conftest import EngineFactory


def test_a_chat_and_an_embedding_model_resident(
    make_engine: EngineFactory, tiny_chat_model: Path, tiny_encoder_model: Path
) -> None:
    engine = make_engine(model_ttl_seconds=300.0)
    engine.load_model(tiny_chat_model, name="chat")
    info = engine.load_model(tiny_encoder_model, name="encoder")
    vectors = engine.embed(EmbedRequest("encoder", [info.tokenizer.encode("hello")])).result(60)
    assert len(vectors.vectors) == 1
    chat, encoder = engine.resident()
    assert (chat.name, chat.kind, encoder.name, encoder.kind) == (
        "chat",
        ModelKind.GENERATION,
        "encoder",
        ModelKind.EMBEDDING,
    )
    weights = (tiny_chat_model / "model.safetensors").stat().st_size
    assert (
        0.9 * weights < chat.weight_bytes <= weights
    )  # float32 parameters: the file less its header
    assert encoder.weight_bytes > 0
    for model in (chat, encoder):
        assert (model.running, model.queued, model.pinned, model.ttl_seconds) == (0, 0, False, 300)
        assert model.unloads_in_seconds is not None and 0 < model.unloads_in_seconds <= 300
