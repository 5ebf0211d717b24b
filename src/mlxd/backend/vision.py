"""Vision-language checkpoints through mlx-vlm: loading, image preprocessing, and the prefill
that merges image features into a prompt's embeddings.

Imported only for a checkpoint whose config has a `vision_config` (mlx-vlm imports
transformers). The engine's batch stays mlx-lm's BatchGenerator: it runs `TextModel`, the
checkpoint's language model behind mlx-lm's calling convention, so text and image requests
decode side by side. An image request's prompt is prefilled here, with its image features in
the embeddings, into a KV cache that BatchRunner hands the BatchGenerator at insert, as it
does a prefix-cache hit; from then on the request is a text sequence like any other. The
prefix cache keys such a prompt on `cache_key`: each image's run of positions carries its
digest, so the same image at the same place hits and another image misses from its run on.

Checked to batch (alone == batched, greedy): mlx-vlm's `llava` (CLIP tower, llama text
model). Models whose language model takes position ids (M-RoPE: Qwen2-VL and its kin) are
refused at load: their decode positions are not the KV offset, which the batch assumes.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mlx.core as mx
import numpy as np
from mlx.nn.layers.base import Module
from mlx_lm.models.cache import KVCache, make_prompt_cache

from mlxd.errors import ModelBroken
from mlxd.types import ImageInputs, PreparedImage

if TYPE_CHECKING:
    from mlxd.backend.mlx_lm.compat import PromptCache

__all__ = [
    "TextModel",
    "VisionParts",
    "VisionProcessor",
    "cache_key",
    "is_vision_config",
    "load_vision",
    "needs_image_prefill",
    "prefill_images",
]

_HASH_BITS = 62  # a digest's share of a cache-key position (negative: never a token id)


def is_vision_config(config: dict[str, Any]) -> bool:
    """A checkpoint mlxd serves through mlx-vlm: its config describes a vision tower."""
    return isinstance(config.get("vision_config"), dict)


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


@dataclass(frozen=True, slots=True, eq=False)
class VisionParts:
    """What a vision checkpoint adds to a LoadedModel: the whole mlx-vlm model (vision tower,
    projector, language model) and its image processor."""

    model: Module
    processor: VisionProcessor


def load_vision(path: Path, *, trust_remote_code: bool) -> tuple[TextModel, VisionParts]:
    """Load a vision checkpoint's model and processor with mlx-vlm (local files only)."""
    try:
        from mlx_vlm.utils import load_model, load_processor
    except ImportError as exc:
        raise ModelBroken(
            f"{path.name} is a vision model: install mlx-vlm (pip install 'mlxd[vision]')"
        ) from exc
    vlm = load_model(path, lazy=False, trust_remote_code=trust_remote_code)
    takes = inspect.signature(vlm.language_model.__call__).parameters
    if "position_ids" in takes:
        raise ModelBroken(
            f"{path.name}: its language model needs multimodal position ids (M-RoPE), which "
            f"mlxd's batch does not carry yet"
        )
    processor = load_processor(path, False, trust_remote_code=trust_remote_code)
    token = getattr(processor, "image_token", None)
    token_id = getattr(processor, "image_token_id", None)
    if not isinstance(token, str) or not isinstance(token_id, int):
        raise ModelBroken(f"{path.name}: its processor names no image token")
    vlm.eval()
    return TextModel(vlm), VisionParts(vlm, VisionProcessor(processor, token, token_id))


def cache_key(prompt_ids: list[int], images: ImageInputs) -> list[int]:
    """The prompt as the prefix cache sees it: each image's run of positions holds a number
    drawn from that image's digest (negative, so never a token id)."""
    runs = iter(images.images)
    key: list[int] = []
    mark = 0
    previous = -1
    for token in prompt_ids:
        if token == images.token_id and previous != images.token_id:
            digest = next(runs).digest
            mark = -1 - (int(digest[:16], 16) & ((1 << _HASH_BITS) - 1))
        key.append(mark if token == images.token_id else token)
        previous = token
    return key


def needs_image_prefill(prompt_ids: list[int], images: ImageInputs, cached: int) -> bool:
    """Some image position lies beyond the `cached` prompt tokens the prefix cache gave."""
    token = images.token_id
    return any(t == token for t in prompt_ids[cached:])


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
    arrays = {
        key: mx.array(np.concatenate([image.arrays[key] for image in images.images]))
        for key in images.images[0].arrays
    }
    pixel_values = arrays.pop("pixel_values")
    features = parts.model.get_input_embeddings(ids, pixel_values, **arrays)
    extra = [k for k, v in features.to_dict().items() if v is not None and k != "inputs_embeds"]
    if extra:
        raise ValueError(f"the model needs {', '.join(extra)} beside input embeddings")
    embeds = features.inputs_embeds
    prompt_cache: PromptCache = cache if cache is not None else make_prompt_cache(text_model)
    end = len(prompt_ids) - 1
    for at in range(start, end, chunk):
        stop = min(at + chunk, end)
        text_model(ids[:, at:stop], cache=prompt_cache, input_embeddings=embeds[:, at:stop])
        mx.eval([c.state for c in prompt_cache])  # type: ignore[attr-defined]
    return prompt_cache
