"""A vision checkpoint's image preprocessing: pixel arrays, the positions an image fills, and
the digest the prefix cache keys it on."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np

from mlxd.types import PreparedImage

__all__ = ["VisionProcessor"]


class VisionProcessor:
    """The checkpoint's processor (mlx-vlm / transformers), used for images only: the text is
    rendered and tokenized by mlxd's chat layer. `prepare` runs on callers' threads."""

    def __init__(self, processor: Any, image_token: str, image_token_id: int) -> None:
        self._processor = processor
        self._image_token = image_token
        self._image_token_id = image_token_id
        self._lock = threading.Lock()  # HF processors keep state; one image at a time

    @property
    def image_token(self) -> str:
        return self._image_token

    @property
    def image_token_id(self) -> int:
        return self._image_token_id

    def prepare(self, image: Any) -> PreparedImage:
        """Pixel arrays for one RGB image and the number of positions its features fill."""
        with self._lock:
            out = self._processor(text=[self._image_token], images=[image])
        arrays = {
            key: np.asarray(value)
            for key, value in out.items()
            if key not in ("input_ids", "attention_mask") and value is not None
        }
        if "pixel_values" not in arrays:
            raise ValueError("the processor gave no pixel_values")
        tokens = int((np.asarray(out["input_ids"]) == self._image_token_id).sum())
        if tokens < 1:
            raise ValueError("the processor placed no image positions")
        digest = hashlib.sha256()
        for key in sorted(arrays):
            digest.update(key.encode())
            digest.update(str(arrays[key].shape).encode())
            digest.update(np.ascontiguousarray(arrays[key]).tobytes())
        return PreparedImage(arrays=arrays, tokens=tokens, digest=digest.hexdigest())
