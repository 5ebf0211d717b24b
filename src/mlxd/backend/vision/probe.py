"""A load-time check of a vision architecture no test has verified (not batching in
checkpoint.VISION_FAMILIES): one small image through its processor and its embeddings step,
so that a model whose language model needs more than input embeddings is refused when it
loads, not found out by the first image request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mlxd.backend.vision.embeddings import image_features
from mlxd.backend.vision.processor import VisionProcessor
from mlxd.errors import ModelBroken, one_line
from mlxd.types import ImageInputs

__all__ = ["probe_images"]

_SIDE = 64  # pixels: small enough to be quick, large enough for every tower's patching


def probe_images(path: Path, model: Any, processor: VisionProcessor) -> None:
    """Raise ModelBroken unless one gray image prepares and embeds into as many positions as
    its prompt text holds."""
    try:  # an RGB array: processors take one as they take a decoded image
        image = processor.prepare(np.full((_SIDE, _SIDE, 3), 128, dtype=np.uint8))
        ids = processor.encode(image.text)
        inputs = ImageInputs((image,), processor.image_token_id, processor.image_token)
        embeds, _ = image_features(model, ids, inputs)
        if embeds.shape[:2] != (1, len(ids)):
            raise ValueError(f"{embeds.shape[1]} embeddings for {len(ids)} prompt positions")
    except Exception as exc:  # library code on an architecture no test covers
        raise ModelBroken(
            f"{path.name}: mlxd has not verified this vision architecture, and its image "
            f"path fails on a probe image: {one_line(exc)}"
        ) from None
