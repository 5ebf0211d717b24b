"""The network of an embedding checkpoint as one call: token ids and their mask in, hidden
states out. Encoders (BERT, XLM-R, ModernBERT) come from mlx-embeddings' model classes,
decoders (Qwen3-Embedding) from mlx-lm's, whose inner body returns the final hidden states."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mlxd.errors import ModelBroken

if TYPE_CHECKING:
    import mlx.core as mx
    from mlx.nn.layers.base import Module

# (token ids, mask) -> (rows, tokens, dims) hidden states, or (rows, dims) already pooled
# (ModernBERT's model class pools by its own config).
Body = Callable[["mx.array", "mx.array"], "mx.array"]


def encoder_body(path: Path) -> tuple[Module, Body]:
    """mlx-embeddings' model of an encoder checkpoint (the `embeddings` extra)."""
    try:
        from mlx_embeddings.utils import load_model
    except ImportError as exc:
        raise ModelBroken(
            f"{path.name} is an encoder embedding model: install mlxd[embeddings] to run it"
        ) from exc
    model = load_model(path)

    def run(ids: mx.array, mask: mx.array) -> mx.array:
        out = model(ids, attention_mask=mask)
        return out.last_hidden_state  # type: ignore[no-any-return]

    return model, run


def decoder_body(model: Module, name: str) -> Body:
    """The causal body of an mlx-lm model: rows are right-padded, so a real token never sees
    padding and the mask is not needed."""
    inner = getattr(model, "model", None)
    if inner is None or not callable(inner):
        raise ModelBroken(f"{name}: its mlx-lm model has no inner body to take hidden states from")

    def run(ids: mx.array, mask: mx.array) -> mx.array:
        return inner(ids)  # type: ignore[no-any-return]

    return run
