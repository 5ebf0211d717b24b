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

Each image's place in the prompt is the text its processor writes for it (`VisionProcessor.
prepare`: image tokens with the family's begin/end, tile, row and break tokens), so prompt ids
equal mlx-vlm's processor's. Checked to batch (alone == batched, greedy, and equal to mlx-vlm's
own generation): `checkpoint.VISION_FAMILIES` entries with batches=True. The M-RoPE
families (MROPE_FAMILIES: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) decode at each row's KV offset plus
a per-row delta that its cache carries through the batch (mlx_lm.row_deltas). Families whose
language model takes other inputs are refused at load (that table): cross-attention (mllama),
per-layer inputs (Gemma 3n); so are other language models that take position ids.
"""

from mlxd.backend.vision.cache_key import cache_key, needs_image_prefill
from mlxd.backend.vision.load import MROPE_FAMILIES, VisionParts, is_vision_config, load_vision
from mlxd.backend.vision.prefill import joining_cache, prefill_images, prompt_rope_delta
from mlxd.backend.vision.processor import VisionProcessor
from mlxd.backend.vision.text_model import TextModel

__all__ = [
    "MROPE_FAMILIES",
    "TextModel",
    "VisionParts",
    "VisionProcessor",
    "cache_key",
    "is_vision_config",
    "joining_cache",
    "load_vision",
    "needs_image_prefill",
    "prefill_images",
    "prompt_rope_delta",
]
