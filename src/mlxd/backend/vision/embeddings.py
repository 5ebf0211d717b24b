"""A prompt's input embeddings with its images' features in their positions, for every family
mlx-vlm's `get_input_embeddings` serves.

Each image goes through the model's own `get_input_embeddings` alone, with the other images'
positions masked out of the ids, and only its own positions are kept. mlx-vlm's multi-image
paths differ per family and some fail on images of different sizes (Pixtral's variable
resolution: pixel arrays of different shapes; Idefics3: different tile counts), while every
family's one-image path is the one mlx-vlm's processor output was made for. The vision towers
see each image alone either way, so the features are the same.

M-RoPE families also return positions, which the prefill computes for the whole prompt
instead (one image's call cannot know the others' grids), and Qwen3-VL its deepstack features
(a mask of the image positions, per-layer features in position order), joined across images.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from mlxd.backend.vision.anyres import ANYRES_GRID, anyres_embeddings
from mlxd.types import ImageInputs

__all__ = ["image_features"]

# Extras a family's get_input_embeddings returns that its language model never reads (mlx-vlm's
# generate passes them as keyword arguments it drops): Gemma 3's bidirectional 4-D mask.
_UNREAD = {"gemma3": frozenset({"attention_mask_4d"})}
_POSITIONS = frozenset({"position_ids", "rope_deltas"})  # M-RoPE: computed by the prefill
_DEEPSTACK = ("visual_pos_masks", "deepstack_visual_embeds")  # Qwen3-VL, joined across images
_OTHER = 0  # stands in for another image's positions (its features are taken from its own run)


def image_features(
    model: Any, prompt_ids: list[int], images: ImageInputs
) -> tuple[mx.array, dict[str, Any]]:
    """(1, len(prompt_ids), hidden) embeddings: text positions embedded, each image's
    positions (its image.tokens image-token positions, in prompt order) its features; and
    what the language model also reads with them (Qwen3-VL's deepstack; else empty)."""
    ids = np.asarray(prompt_ids)
    owner = _owners(ids, images)
    embeds: mx.array | None = None
    deepstack: list[list[mx.array]] = []
    for at, image in enumerate(images.images):
        own = np.where((owner == at) | (owner < 0), ids, _OTHER)
        one, layers = _embed_one(model, own, image.arrays)
        if layers is not None:
            deepstack.append(layers)
        if embeds is None:
            embeds = one
        else:
            embeds = mx.where(mx.array(owner == at)[None, :, None], one, embeds)
    assert embeds is not None  # ImageInputs holds one image at least
    if not deepstack:
        return embeds, {}
    joined = [mx.concatenate(list(parts)) for parts in zip(*deepstack, strict=True)]
    return embeds, dict(zip(_DEEPSTACK, (mx.array(owner >= 0)[None], joined), strict=True))


def _owners(ids: np.ndarray, images: ImageInputs) -> np.ndarray:
    """Per position, the index of the image it belongs to, -1 for text."""
    owner = np.full(ids.shape, -1)
    at = np.flatnonzero(ids == images.token_id)
    counts = [image.tokens for image in images.images]
    if len(at) != sum(counts):
        raise ValueError(f"the prompt holds {len(at)} image positions, its images {sum(counts)}")
    owner[at] = np.repeat(np.arange(len(counts)), counts)
    return owner


def _embed_one(
    model: Any, ids: np.ndarray, arrays: dict[str, Any]
) -> tuple[mx.array, list[mx.array] | None]:
    """One image's embeddings, and its deepstack features per layer (Qwen3-VL; else None)."""
    family = str(getattr(model, "model_type", "") or getattr(model.config, "model_type", ""))
    if family == "llava_next":  # mlx-vlm's own splice does not fit its processor's prompt
        return anyres_embeddings(model, ids, arrays), None
    extras = {key: mx.array(value) for key, value in arrays.items() if key != ANYRES_GRID}
    pixel_values = extras.pop("pixel_values")
    batch = mx.array(ids)[None]
    features = model.get_input_embeddings(batch, pixel_values, mask=mx.ones(batch.shape), **extras)
    unread = _UNREAD.get(family, frozenset())
    if callable(getattr(model.language_model, "get_rope_index", None)):
        unread = unread | _POSITIONS | frozenset(_DEEPSTACK)  # the M-RoPE families
    extra = [
        key
        for key, value in features.to_dict().items()
        if value is not None and key != "inputs_embeds" and key not in unread
    ]
    if extra:
        raise ValueError(f"the model needs {', '.join(extra)} beside input embeddings")
    layers = features.deepstack_visual_embeds
    embeds: mx.array = features.inputs_embeds
    return embeds, None if layers is None else list(layers)
