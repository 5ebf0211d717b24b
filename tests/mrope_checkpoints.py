"""Tiny random-weight Qwen-VL checkpoints for tests: mlx-vlm 0.7.10's own qwen2_vl,
qwen2_5_vl and qwen3_vl classes (M-RoPE text models: 3-axis positions), their own processors
(Qwen2VLImageProcessor / Qwen3VLImageProcessor), the BPE tokenizer of tests/checkpoints.py plus
Qwen's vision tokens, and a ChatML template that writes one `<|vision_start|><|image_pad|>
<|vision_end|>` per image part, as Qwen's does. Built in about a second, never downloaded.

Images are resized between MIN_PIXELS and MAX_PIXELS in 14-pixel patches merged 2x2: a 56x84
picture is a 4x6 patch grid, 6 image positions whose M-RoPE span is 3, so every image shifts
the text after it by -3 positions against its KV offset (a wrong decode position shows).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from tests.checkpoints import SIZES, SPECIAL_TOKENS, train_tokenizer
from tests.vision_checkpoints import write_random_model

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH = 14
MIN_PIXELS = 56 * 56
MAX_PIXELS = 84 * 112

QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_MEAN = [0.48145466, 0.4578275, 0.40821073]
_STD = [0.26862954, 0.26130258, 0.27577711]
_PROCESSORS = {
    "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLImageProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLImageProcessor"),
    "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLImageProcessor"),
    "qwen3_5": ("Qwen3VLProcessor", "Qwen3VLImageProcessor"),
}


def make_mrope_checkpoint(
    path: Path, family: str = "qwen2_5_vl", seed: int = 0, size: str = "tiny"
) -> Path:
    """Write a `family` checkpoint (one of FAMILIES; text model dims of tests/checkpoints.py
    SIZES[size], in heads of 32) into `path` and return it."""
    import mlx.core as mx
    from tokenizers import AddedToken

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(512)
    tok.add_special_tokens([AddedToken(t, special=True) for t in VISION_TOKENS])
    tok.save(str(path / "tokenizer.json"))
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS + VISION_TOKENS}
    _write_processor_files(path, family, ids)
    config = _config(family, tok.get_vocab_size(), ids, size)
    module = importlib.import_module(f"mlx_vlm.models.{family}")
    model_config = module.ModelConfig.from_dict(json.loads(json.dumps(config)))
    model_config.text_config = module.TextConfig.from_dict(config["text_config"])
    model_config.vision_config = module.VisionConfig.from_dict(config["vision_config"])
    mx.random.seed(seed)
    model = module.Model(model_config)
    return write_random_model(model, path, config)


def _write_processor_files(path: Path, family: str, ids: dict[str, int]) -> None:
    processor, image_processor = _PROCESSORS[family]
    _write(path / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "added_tokens_decoder": {
            str(i): {"content": t, "special": True} for t, i in ids.items()
        },
        "chat_template": QWEN_VL_TEMPLATE,
    })  # fmt: skip
    _write(path / "preprocessor_config.json", {
        "image_processor_type": image_processor,
        "processor_class": processor,
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": PATCH,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": _MEAN,
        "image_std": _STD,
    })  # fmt: skip
    _write(path / "processor_config.json", {"processor_class": processor})


def _config(family: str, vocab: int, ids: dict[str, int], size: str) -> dict[str, Any]:
    # Heads of 32: M-RoPE splits 16 frequency pairs, and quantized KV's groups of 32 fit.
    heads = SIZES[size]["hidden_size"] // 32
    dims = {**SIZES[size], "num_attention_heads": heads, "num_key_value_heads": heads}
    head_dim = 32
    text: dict[str, Any] = {
        "model_type": family,
        **dims,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e4,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
    }
    vision: dict[str, Any] = {
        "model_type": family,
        "depth": 2,
        "num_heads": 4,
        "patch_size": PATCH,
        "spatial_patch_size": PATCH,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
    }
    if family == "qwen2_vl":
        vision.update(embed_dim=32, hidden_size=dims["hidden_size"], mlp_ratio=2)
    else:
        vision.update(hidden_size=32, intermediate_size=64, out_hidden_size=dims["hidden_size"])
        vision.update(window_size=112, fullatt_block_indexes=[1])
    if family == "qwen3_vl":
        text.update(head_dim=head_dim, rope_scaling={"type": "default", "mrope_section": [4, 6, 6]})
        vision.update(num_position_embeddings=64, deepstack_visual_indexes=[0])
    if family == "qwen3_5":  # gated delta-net layers, then one attention layer in every 2
        text.pop("rope_scaling")
        text.update(
            head_dim=head_dim, num_hidden_layers=4, full_attention_interval=2,
            linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4,
            rope_parameters={"type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1e4,
                             "partial_rotary_factor": 0.5},
        )  # fmt: skip
        vision.update(num_position_embeddings=64, deepstack_visual_indexes=[])
    return {
        "model_type": family,
        "architectures": [family],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vocab_size": vocab,
        "eos_token_id": ids["<|im_end|>"],
        **({} if family in ("qwen3_vl", "qwen3_5") else text),
        "text_config": text,
        "vision_config": vision,
    }


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2))
