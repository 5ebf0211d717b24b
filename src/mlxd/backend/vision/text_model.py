"""A vision checkpoint's language model behind mlx-lm's calling convention, so mlx-lm's
BatchGenerator runs it beside text models' rows."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.nn.layers.base import Module
from mlx_lm.models.cache import KVCache

__all__ = ["TextModel"]


class TextModel(Module):
    """A vision model's language model as mlx-lm calls a model: `(tokens, cache,
    input_embeddings) -> logits`, `layers`, `make_cache`. What the BatchGenerator runs."""

    def __init__(self, vlm: Module) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.language_model = vlm.language_model

    def __call__(
        self, inputs: mx.array, cache: Any = None, input_embeddings: mx.array | None = None
    ) -> mx.array:
        out = self.language_model(inputs, cache=cache, inputs_embeds=input_embeddings)
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
