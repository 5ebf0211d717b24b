"""A vision checkpoint's image preprocessing: pixel arrays, the text the processor writes for
an image (its positions and the family's structure tokens around them), and the digest the
prefix cache keys it on."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import numpy as np

from mlxd.backend.vision.anyres import ANYRES_GRID, anyres_grid
from mlxd.types import PreparedImage

__all__ = ["VisionProcessor", "placeholder_of"]

# What a processor returns that is about the text, not the image.
_TEXT_OUTPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})


def placeholder_of(processor: Any) -> str | None:
    """The placeholder a chat template writes for an image: Gemma 3's processors expand a
    begin-of-image token (`boi_token`), the others their image token."""
    token = getattr(processor, "boi_token", None) or getattr(processor, "image_token", None)
    return token if isinstance(token, str) else None


class VisionProcessor:
    """The checkpoint's processor (mlx-vlm / transformers), used for images only: the text is
    rendered and tokenized by mlxd's chat layer, which writes each image's `text` where the
    template put the placeholder. `prepare` runs on callers' threads."""

    def __init__(self, processor: Any, image_token: str, image_token_id: int) -> None:
        self._processor = processor
        self._image_token = image_token
        self._image_token_id = image_token_id
        self._lock = threading.Lock()  # HF processors keep state; one image at a time
        self._added = _added_around(processor.tokenizer, image_token)

    @property
    def image_token(self) -> str:
        """The placeholder the chat template writes (not always the feature token)."""
        return self._image_token

    @property
    def image_token_id(self) -> int:
        """The token whose positions the image's features fill."""
        return self._image_token_id

    def prepare(self, image: Any) -> PreparedImage:
        """The processor run on the placeholder alone and the image: its arrays, and the
        text it put in the placeholder's place (decoded from its ids without the tokenizer's
        BOS/EOS, checked to re-encode to them), so that the whole prompt tokenizes as the
        processor tokenizes it."""
        with self._lock:
            out = self._processor(text=[self._image_token], images=[image])
        arrays = {
            key: np.asarray(value)
            for key, value in out.items()
            if key not in _TEXT_OUTPUTS and value is not None
        }
        if "pixel_values" not in arrays:
            raise ValueError("the processor gave no pixel_values")
        grid = anyres_grid(self._processor, arrays)
        if grid is not None:
            arrays[ANYRES_GRID] = grid
        ids = [int(t) for t in np.asarray(out["input_ids"]).reshape(-1)]
        ids = ids[self._added[0] : len(ids) - self._added[1]]
        tokens = ids.count(self._image_token_id)
        if tokens < 1:
            raise ValueError("the processor placed no image positions")
        text = self._text_of(ids)
        digest = hashlib.sha256(text.encode())
        for key in sorted(arrays):
            digest.update(key.encode())
            digest.update(str(arrays[key].shape).encode())
            digest.update(np.ascontiguousarray(arrays[key]).tobytes())
        return PreparedImage(arrays=arrays, tokens=tokens, digest=digest.hexdigest(), text=text)

    def encode(self, text: str) -> list[int]:
        """`text`'s ids as the processor's tokenizer gives them (no BOS/EOS added)."""
        ids: list[int] = self._processor.tokenizer.encode(text, add_special_tokens=False)
        return ids

    def _text_of(self, ids: list[int]) -> str:
        text: str = self._processor.tokenizer.decode(ids, skip_special_tokens=False)
        if self.encode(text) != ids:
            raise ValueError("the processor's image text does not tokenize back to its ids")
        return text


def _added_around(tokenizer: Any, text: str) -> tuple[int, int]:
    """How many ids the tokenizer adds before and after a text (BOS, EOS): processors do not
    all take add_special_tokens, so their ids are trimmed by these counts instead."""
    bare = tokenizer.encode(text, add_special_tokens=False)
    full = tokenizer.encode(text, add_special_tokens=True)
    head = next((i for i in range(len(full)) if full[i : i + len(bare)] == bare), 0)
    return head, len(full) - head - len(bare)
