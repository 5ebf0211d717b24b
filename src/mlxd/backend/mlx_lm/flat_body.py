"""Decoder embedding checkpoints through mlx-lm's loader: `utils.load_model` with our own
`get_model_classes`, whose model class reads the layouts embedding checkpoints ship.

Relies on mlx-lm's private `utils._get_classes` (its model-type remapping), and on
`load_model` calling the model's `sanitize(weights)` before a strict `load_weights`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlx_lm import utils

from mlxd.backend.mlx_lm.compat import load_tokenizer

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module
    from mlx_lm.tokenizer_utils import TokenizerWrapper


def load_embedding_body(path: Path, *, trust_remote_code: bool) -> tuple[Module, TokenizerWrapper]:
    """`load` of a decoder embedding checkpoint, which may store its body flat (Qwen's own
    Qwen3-Embedding: `layers.0...`, not `model.layers.0...`) and without the output head its
    config declares (Qwen3-Embedding-8B): the body is what embeddings read. Through
    `utils._get_classes`, mlx-lm's own model-type remapping."""

    model, config = utils.load_model(
        path, trust_remote_code=trust_remote_code, get_model_classes=embedding_classes
    )
    eos = config.get("eos_token_id")
    return model, load_tokenizer(path, eos, trust_remote_code=trust_remote_code)


def embedding_classes(config: dict[str, Any]) -> tuple[type[Module], type]:
    """mlx-lm's model and args classes for `config`, the model reading flat bodies."""
    model_class, args_class = utils._get_classes(config)
    return _flat_body_model(model_class), args_class


def _flat_body_model(base: type[Module]) -> type[Module]:
    class FlatBody(base):  # type: ignore[misc,valid-type]
        def sanitize(self, weights: dict[str, Any]) -> dict[str, Any]:
            if not any(k.startswith("model.") for k in weights):
                weights = {
                    k if k.startswith("lm_head.") else f"model.{k}": v for k, v in weights.items()
                }
            embed = weights.get("model.embed_tokens.weight")
            if getattr(self, "lm_head", None) is not None and "lm_head.weight" not in weights:
                if embed is not None:  # an unused head: embeddings never read it
                    weights["lm_head.weight"] = embed
            parent = getattr(super(), "sanitize", None)
            return parent(weights) if parent is not None else weights

    return FlatBody
