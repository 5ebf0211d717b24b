"""LLaVA-Next's image features ("anyres"), placed in the prompt by mlxd itself.

mlx-vlm 0.7.10's llava_next model splices an image's features in at a single image token,
while its processor writes one image token per feature (the base image, then the tile grid
unpadded to the image's aspect with one `image_newline` per feature row). So mlxd computes the
features with the model's own vision tower, projector and `image_newline`, lays them out as
the processor counted them (and as transformers' LlavaNext model packs them), and puts them in
the image's run of positions; the prompt keeps the processor's ids.
"""

from __future__ import annotations

from math import isqrt
from typing import Any

import mlx.core as mx
import numpy as np

__all__ = ["ANYRES_GRID", "anyres_embeddings", "anyres_grid"]

ANYRES_GRID = "anyres_grid"  # the arrays entry: (tile rows, tile columns) of one image


def anyres_grid(processor: Any, arrays: dict[str, np.ndarray]) -> np.ndarray | None:
    """The tile grid the processor cut an image into (rows, columns), for processors with
    anyres pinpoints; None for others. mlx-vlm's model config drops the pinpoints, so the
    grid travels with the image's arrays."""
    image_processor: Any = getattr(processor, "image_processor", None)
    pinpoints = getattr(image_processor, "image_grid_pinpoints", None)
    sizes = arrays.get("image_sizes")
    if not pinpoints or sizes is None:
        return None
    from transformers.image_processing_utils import select_best_resolution

    height, width = (int(v) for v in sizes.reshape(-1)[:2])
    best = select_best_resolution((height, width), pinpoints)
    crop = image_processor.crop_size
    return np.array([best[0] // crop["height"], best[1] // crop["width"]])


def anyres_embeddings(model: Any, ids: np.ndarray, arrays: dict[str, np.ndarray]) -> mx.array:
    """(1, len(ids), hidden): `ids` embedded, its image-token positions (as many as the
    image has features, in order) holding the image's features."""
    embeds = model.language_model.model.embed_tokens(mx.array(ids)[None])
    features = _features(model, arrays).astype(embeds.dtype)
    at = ids == model.config.image_token_index
    if int(at.sum()) != features.shape[0]:
        raise ValueError(f"{int(at.sum())} image positions for {features.shape[0]} features")
    gathered = features[mx.array(np.maximum(np.cumsum(at) - 1, 0))]
    return mx.where(mx.array(at)[None, :, None], gathered[None], embeds)


def _features(model: Any, arrays: dict[str, np.ndarray]) -> mx.array:
    """(features, hidden): the base image's, then the grid's row by row, each row ended by
    `image_newline`."""
    rows, cols = (int(v) for v in arrays[ANYRES_GRID].reshape(-1))
    height, width = (int(v) for v in arrays["image_sizes"].reshape(-1)[:2])
    # A batch's images are padded to one tile count; one image's extra tiles are never read.
    pixels = mx.array(arrays["pixel_values"][0, : 1 + rows * cols])
    *_, hidden = model.vision_tower(pixels.transpose(0, 2, 3, 1), output_hidden_states=True)
    chosen = hidden[model.vision_feature_layer]
    if model.vision_feature_select_strategy == "default":
        chosen = chosen[:, 1:]  # the CLS position
    tiles = model.multi_modal_projector(chosen)
    side = isqrt(tiles.shape[1])
    grid = tiles[1:].reshape(rows, cols, side, side, -1).transpose(0, 2, 1, 3, 4)
    grid = _unpad(grid.reshape(rows * side, cols * side, -1), height, width)
    newline = mx.broadcast_to(model.image_newline, (grid.shape[0], 1, grid.shape[-1]))
    grid = mx.concatenate([grid, newline.astype(grid.dtype)], axis=1)
    return mx.concatenate([tiles[0], grid.reshape(-1, grid.shape[-1])])


def _unpad(grid: mx.array, height: int, width: int) -> mx.array:
    """The grid's features without the rows or columns that cover the processor's padding
    of an image of `height` x `width` (the count its processor's expansion assumes)."""
    rows, cols = grid.shape[:2]
    if width / height > cols / rows:
        pad = (rows - int(round(height * (cols / width), 7))) // 2
        return grid[pad : rows - pad]
    pad = (cols - int(round(width * (rows / height), 7))) // 2
    return grid[:, pad : cols - pad]
