"""The prefill of an image prompt: its images' features merged into the embeddings, run into
the KV cache the batch then takes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.vision.embeddings import image_embeddings
from mlxd.backend.vision.load import VisionParts
from mlxd.backend.vision.text_model import TextModel
from mlxd.types import ImageInputs

if TYPE_CHECKING:
    from mlxd.backend.mlx_lm.compat import PromptCache

__all__ = ["prefill_images"]


def prefill_images(
    parts: VisionParts,
    text_model: TextModel,
    prompt_ids: list[int],
    images: ImageInputs,
    cache: PromptCache | None,
    start: int,
    chunk: int,
) -> PromptCache:
    """Run prompt_ids[start:-1] through the language model with the images' features merged
    into its embeddings, extending `cache` (which holds prompt_ids[:start]; None: empty).
    The last prompt token is left for the batch, which computes the first logits from it."""
    ids = mx.array([prompt_ids])
    embeds = image_embeddings(parts.model, prompt_ids, images)
    prompt_cache: PromptCache = cache if cache is not None else make_prompt_cache(text_model)
    end = len(prompt_ids) - 1
    for at in range(start, end, chunk):
        stop = min(at + chunk, end)
        text_model(ids[:, at:stop], cache=prompt_cache, input_embeddings=embeds[:, at:stop])
        mx.eval([c.state for c in prompt_cache])  # type: ignore[attr-defined]
    return prompt_cache
