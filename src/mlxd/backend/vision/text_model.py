"""A vision checkpoint's language model behind mlx-lm's calling convention, so mlx-lm's
BatchGenerator runs it beside text models' rows.

An M-RoPE language model (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: it has `get_rope_index`) is given
explicit 3-axis positions at every call: each row's KV offset plus the delta its cache carries
(mlx_lm.row_deltas), or the image prefill's own positions. Never its own position state, which
mlx-vlm keeps once per model and so cannot serve rows of different prompts in one batch."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.nn.layers.base import Module
from mlx_lm.models.cache import KVCache

from mlxd.backend.mlx_lm.row_deltas import row_positions

__all__ = ["TextModel"]


class TextModel(Module):
    """A vision model's language model as mlx-lm calls a model: `(tokens, cache,
    input_embeddings) -> logits`, `layers`, `make_cache`. What the BatchGenerator runs."""

    def __init__(self, vlm: Module) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.language_model = vlm.language_model
        self.mrope = callable(getattr(vlm.language_model, "get_rope_index", None))

    def __call__(
        self,
        inputs: mx.array,
        cache: Any = None,
        input_embeddings: mx.array | None = None,
        positions: mx.array | None = None,
        **extra: Any,
    ) -> mx.array:
        """Logits for `inputs` (rows, length). `positions` (3, rows, length) and `extra`
        (e.g. Qwen3-VL's deepstack features) come from an image prefill only."""
        if self.mrope:
            if positions is None:
                rows, length = inputs.shape
                flat = row_positions(cache, rows, length)
                positions = mx.broadcast_to(flat[None], (3, rows, length))
            extra["position_ids"] = positions
        out = self.language_model(inputs, cache=cache, inputs_embeds=input_embeddings, **extra)
        logits: mx.array = getattr(out, "logits", out)
        return logits

    @property
    def layers(self) -> list[Module]:
        layers: list[Module] = self.language_model.layers
        return layers

    def make_cache(self) -> list[Any]:
        maker = getattr(self.language_model, "make_cache", None)
        if callable(maker):
            return list(maker())
        return [KVCache() for _ in self.layers]  # type: ignore[no-untyped-call]
