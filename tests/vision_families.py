"""Tiny random-weight checkpoints of the vision families beside llava (tests/vision_checkpoints.py),
each built from mlx-vlm 0.7.10's own model classes with the processor files mlx-vlm's loader
reads, a byte-level BPE tokenizer holding the family's special tokens, and a chat template that
writes the family's image placeholder. Built in about a second; never downloaded.

  gemma3       SigLIP tower, `<start_of_image>` -> "\\n\\n<boi><image_soft_token>*4<eoi>\\n\\n"
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.checkpoints import SPECIAL_TOKENS, train_tokenizer

__all__ = ["FAMILIES", "make_family_checkpoint"]

_HALF = [0.5, 0.5, 0.5]

_TEXT = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
             num_key_value_heads=2)  # fmt: skip

GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message.role == 'assistant' else message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<start_of_image>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def make_family_checkpoint(family: str, path: Path, seed: int = 0) -> Path:
    """Write `family`'s tiny checkpoint into `path` (created) and return it."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    FAMILIES[family](path, seed)
    _write(path / "generation_config.json", {"do_sample": False})
    return path


def _gemma3(path: Path, seed: int) -> None:
    from mlx_vlm.models.gemma3 import config as cfg
    from mlx_vlm.models.gemma3 import gemma3

    specials = ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>",
                "<start_of_image>", "<end_of_image>", "<image_soft_token>"]  # fmt: skip
    ids = _tokenizer(path, specials, GEMMA3_TEMPLATE, {
        "bos_token": "<bos>", "eos_token": "<end_of_turn>", "pad_token": "<pad>",
        "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                 "image_token": "<image_soft_token>"},
    })  # fmt: skip
    _write(path / "preprocessor_config.json", {
        "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
        "do_resize": True, "size": {"height": 28, "width": 28}, "resample": 2,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": _HALF, "image_std": _HALF, "do_convert_rgb": None,
        "do_pan_and_scan": None,
    })  # fmt: skip
    _write(path / "processor_config.json", {"processor_class": "Gemma3Processor",
                                            "image_seq_length": 4})  # fmt: skip
    text = {"model_type": "gemma3_text", **_TEXT, "head_dim": 16, "query_pre_attn_scalar": 16,
            "sliding_window": 512, "sliding_window_pattern": 2, "mm_tokens_per_image": 4,
            "vocab_size": ids["vocab"], "rope_scaling": None}  # fmt: skip
    vision = {"model_type": "siglip_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 4, "patch_size": 7,
              "image_size": 28}  # fmt: skip
    config = {
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "image_token_index": ids["<image_soft_token>"], "boi_token_index": ids["<start_of_image>"],
        "eoi_token_index": ids["<end_of_image>"], "pad_token_id": ids["<pad>"],
        "hidden_size": 64, "vocab_size": ids["vocab"], "eos_token_id": [ids["<end_of_turn>"]],
        "mm_tokens_per_image": 4, "text_config": text, "vision_config": vision,
    }  # fmt: skip
    model_config = cfg.ModelConfig.from_dict(config)
    model_config.text_config = cfg.TextConfig.from_dict(text)
    model_config.vision_config = cfg.VisionConfig.from_dict(vision)
    _save(path, gemma3.Model(model_config), config, seed, embed_scale=0.02)


FAMILIES: dict[str, Callable[[Path, int], None]] = {"gemma3": _gemma3}


def _tokenizer(
    path: Path, specials: list[str], template: str, config: dict[str, Any]
) -> dict[str, int]:
    """tokenizer.json + tokenizer_config.json; the ids of `specials` and the vocabulary size."""
    from tokenizers import AddedToken

    tok = train_tokenizer(512)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.save(str(path / "tokenizer.json"))
    every = SPECIAL_TOKENS + specials
    _write(path / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 2048,
        "bos_token": None, "unk_token": None, **config,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True} for t in every
        },
        "chat_template": template,
    })  # fmt: skip
    return {**{t: tok.token_to_id(t) for t in specials}, "vocab": tok.get_vocab_size()}


def _save(
    path: Path, model: Any, config: dict[str, Any], seed: int, embed_scale: float = 0.5
) -> None:
    """Random weights, larger than the default init so that greedy output follows the image
    (`embed_scale`: a family that scales its embeddings up needs them smaller, or the last
    token's embedding decides every next token)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.random.seed(seed)
    params = tree_flatten(model.parameters())
    model.load_weights(
        [(k, v if "norm" in k else mx.random.normal(v.shape) * _scale(k, embed_scale))
         for k, v in params]
    )  # fmt: skip
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write(path / "config.json", config)


def _scale(key: str, embed_scale: float) -> float:
    return embed_scale if "embed_tokens" in key else 0.5


def _write(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2))
