"""The prefill of an image prompt: its images' features merged into the embeddings, run into
the KV cache the batch then takes; for an M-RoPE model also the prompt's 3-axis positions and
the delta its later tokens decode at (mlx-vlm's `get_rope_index`, from the image grids), which
every row's cache carries into the batch (`joining_cache`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.mlx_lm import row_deltas
from mlxd.backend.vision.cache_key import needs_image_prefill
from mlxd.backend.vision.embeddings import image_features
from mlxd.backend.vision.load import VisionParts
from mlxd.backend.vision.text_model import TextModel
from mlxd.types import ImageInputs

if TYPE_CHECKING:
    from mlxd.backend.mlx_lm.compat import PromptCache

__all__ = ["joining_cache", "prefill_images", "prompt_rope_delta"]


def joining_cache(
    parts: VisionParts | None,
    model: object,
    prompt_ids: list[int],
    images: ImageInputs | None,
    cache: PromptCache | None,
    cached: int,
    chunk: int,
    points: Sequence[int] = (),
    at_point: Callable[[int, PromptCache], None] | None = None,
) -> tuple[PromptCache | None, int]:
    """The cache a sequence joins the batch with (`cache` holds its first `cached` tokens)
    and where the batch's prefill starts: an image prompt's images prefilled here
    (`prefill_images`, with `points` and `at_point`); on an M-RoPE model every row's cache
    carries its position delta (row_deltas; 0 for text), whatever prefilled it. Raises
    ValueError for images or an M-RoPE model without vision parts (a text-only model)."""
    if images is None and not getattr(model, "mrope", False):
        return cache, cached
    if parts is None or not isinstance(model, TextModel):
        raise ValueError("this model takes text only")
    start, delta = cached, 0
    if images is not None and needs_image_prefill(prompt_ids, images, cached):
        cache, delta = prefill_images(
            parts, model, prompt_ids, images, cache, cached, chunk, points, at_point
        )
        start = len(prompt_ids) - 1
    elif images is not None and model.mrope:
        delta = prompt_rope_delta(parts, prompt_ids, images)
    if not model.mrope:
        return cache, start
    return row_deltas.carry_delta(cache or make_prompt_cache(model), delta), start


def prefill_images(
    parts: VisionParts,
    text_model: TextModel,
    prompt_ids: list[int],
    images: ImageInputs,
    cache: PromptCache | None,
    start: int,
    chunk: int,
    points: Sequence[int] = (),
    at_point: Callable[[int, PromptCache], None] | None = None,
) -> tuple[PromptCache, int]:
    """Run prompt_ids[start:-1] through the language model with the images' features merged
    into its embeddings, extending `cache` (which holds prompt_ids[:start]; None: empty).
    The last prompt token is left for the batch, which computes the first logits from it.
    No chunk crosses one of `points` (start < point <= len - 1), and `at_point(point, cache)`
    is called when the cache holds prompt_ids[:point] (the prefix cache's snapshots: a
    cache that cannot be cut back, a sliding window past full, is only reusable as it was
    at such a point). Returns the cache and the prompt's M-RoPE delta (0 for other models)."""
    ids = mx.array([prompt_ids])
    # Qwen3-VL's deepstack features (per_call) span the prompt; its language model cuts them
    # to each chunk by the KV offset.
    embeds, per_call = image_features(parts.model, prompt_ids, images)
    positions, delta = _positions(parts, text_model, prompt_ids, images)
    prompt_cache: PromptCache = cache if cache is not None else make_prompt_cache(text_model)
    end = len(prompt_ids) - 1
    for at, stop in _chunks(start, end, chunk, points):
        text_model(
            ids[:, at:stop],
            cache=prompt_cache,
            input_embeddings=embeds[:, at:stop],
            positions=None if positions is None else positions[..., at:stop],
            **per_call,
        )
        mx.eval([c.state for c in prompt_cache])  # type: ignore[attr-defined]
        if at_point is not None and stop in points:
            at_point(stop, prompt_cache)
    return prompt_cache, delta


def _chunks(start: int, end: int, chunk: int, points: Sequence[int]) -> list[tuple[int, int]]:
    """[at, stop) spans of at most `chunk` tokens covering start..end, cut at every point."""
    ends = sorted({p for p in points if start < p < end} | {end})
    spans, at = [], start
    for stop in ends:
        spans += [(a, min(a + chunk, stop)) for a in range(at, stop, chunk)]
        at = stop
    return spans


def prompt_rope_delta(parts: VisionParts, prompt_ids: list[int], images: ImageInputs) -> int:
    """The M-RoPE delta of a prompt: where its text after the last image decodes against the
    KV offset, from its tokens and image grids alone (no vision tower run)."""
    return _rope_index(parts, prompt_ids, images)[1]


def _positions(
    parts: VisionParts, text_model: TextModel, prompt_ids: list[int], images: ImageInputs
) -> tuple[mx.array | None, int]:
    if not text_model.mrope:
        return None, 0
    return _rope_index(parts, prompt_ids, images)


def _rope_index(
    parts: VisionParts, prompt_ids: list[int], images: ImageInputs
) -> tuple[mx.array, int]:
    """mlx-vlm's own 3-axis positions (3, 1, len) of the whole prompt, and its delta."""
    grids = mx.array(np.concatenate([image.arrays["image_grid_thw"] for image in images.images]))
    positions, deltas = parts.model.language_model.get_rope_index(mx.array([prompt_ids]), grids)
    return positions, int(deltas.reshape(-1)[0].item())
