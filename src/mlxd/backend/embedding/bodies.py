"""The network of an embedding checkpoint as one call: token ids and their mask in, hidden
states out. Encoders come from mlx-embeddings' model classes (BERT, XLM-R and RoBERTa,
ModernBERT) or mlxd's own network (nomic-bert); decoders (Qwen3-Embedding) from mlx-lm's,
whose inner body returns the final hidden states."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mlxd.checkpoint import encoder_module, encoder_refusal, runs_own_network
from mlxd.errors import ModelBroken

if TYPE_CHECKING:
    import mlx.core as mx
    from mlx.nn.layers.base import Module

# (token ids, mask) -> (rows, tokens, dims) hidden states, or (rows, dims) already pooled
# (ModernBERT's model class pools by its own config).
Body = Callable[["mx.array", "mx.array"], "mx.array"]


def encoder_body(path: Path, config: Mapping[str, object]) -> tuple[Module, Body]:
    """The network of an encoder checkpoint: mlxd's own for OWN_ENCODERS (nomic-bert), else
    mlx-embeddings' class of its family (the `embeddings` extra; RoBERTa runs as XLM-R)."""
    refusal = encoder_refusal(config)
    if refusal is not None:
        raise ModelBroken(f"{path.name} is not served: {refusal}")
    if runs_own_network(config):
        from mlxd.backend.embedding.nomic_bert import load_nomic_bert

        nomic = load_nomic_bert(path, config)
        return nomic, nomic
    try:
        from mlx_embeddings.utils import load_model
    except ImportError as exc:
        raise ModelBroken(
            f"{path.name} is an encoder embedding model: install mlxd[embeddings] to run it"
        ) from exc
    family = encoder_module(str(config.get("model_type", "")))
    model = load_model(path, model_config={"model_type": family})

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
