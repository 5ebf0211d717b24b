"""Tiny random-weight checkpoints of the vision families beside llava (tests/vision_checkpoints.py),
each built from mlx-vlm 0.7.10's own model classes with the processor files mlx-vlm's loader
reads, a byte-level BPE tokenizer holding the family's special tokens, and a chat template that
writes the family's image placeholder. Built in about a second; never downloaded.

  gemma3     SigLIP tower; `<start_of_image>` -> "\\n\\n<start_of_image>", 4 `<image_soft_token>`,
             "<end_of_image>\\n\\n"
  idefics3   image splitting: 28-pixel tiles (a 40x30 image: 2x2) and a global image, each 4
             `<image>` between `<fake_token_around_image>` and its `<row_r_col_c>` / `<global-img>`
  smolvlm    SmolVLM2: Idefics3's model and layout through SmolVLM's own processor classes
  mistral3   Pixtral tower at variable resolution (longest edge 32, 8-pixel tokens): rows of
             `[IMG]` split by `[IMG_BREAK]`, ended by `[IMG_END]`
  pixtral    the same layout from Pixtral itself (4-pixel patches, no 2x2 merge)
  llava_next anyres: a 28-pixel base image and a grid of 28-pixel tiles from the best of three
             pinpoints, 14-pixel CLIP patches; the grid's features unpadded to the image's
             aspect, one image_newline per feature row (a 40x30 image: 4 + 24 `<image>`)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.checkpoints import SPECIAL_TOKENS, train_tokenizer

__all__ = ["FAMILIES", "make_family_checkpoint", "with_sliding_window"]

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


def with_sliding_window(path: Path, window: int) -> Path:
    """The checkpoint at `path` with its text model's sliding window set to `window` (the
    weights do not depend on it): a window shorter than the tests' prompts wraps."""
    config = json.loads((path / "config.json").read_text())
    config["text_config"]["sliding_window"] = window
    _write(path / "config.json", config)
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


IDEFICS3_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message.role | capitalize }}:"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<image>{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def _idefics3(path: Path, seed: int, model_type: str = "idefics3") -> None:
    """Idefics3, or SmolVLM2 (`smolvlm`: the same model, SmolVLM's own processor classes)."""
    import importlib

    cfg = importlib.import_module(f"mlx_vlm.models.{model_type}.config")
    module = importlib.import_module(f"mlx_vlm.models.{model_type}.{model_type}")
    classes = "Idefics3" if model_type == "idefics3" else "SmolVLM"

    grid = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
    specials = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>",
                *grid]  # fmt: skip
    ids = _tokenizer(path, specials, IDEFICS3_TEMPLATE, {
        "bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>",
        "pad_token": "<|endoftext|>",
    })  # fmt: skip
    _write(path / "preprocessor_config.json", {
        "image_processor_type": f"{classes}ImageProcessor",
        "processor_class": f"{classes}Processor",
        "do_resize": True, "size": {"longest_edge": 56}, "max_image_size": {"longest_edge": 28},
        "do_image_splitting": True, "resample": 1, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": _HALF,
        "image_std": _HALF, "do_convert_rgb": True, "do_pad": True,
    })  # fmt: skip
    _write(path / "processor_config.json", {"processor_class": f"{classes}Processor",
                                            "image_seq_len": 4})  # fmt: skip
    text = {"model_type": "llama", **_TEXT, "rms_norm_eps": 1e-5, "vocab_size": ids["vocab"],
            "rope_theta": 1e4, "max_position_embeddings": 2048}  # fmt: skip
    vision = {"model_type": f"{model_type}_vision", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 4, "patch_size": 7,
              "image_size": 28}  # fmt: skip
    config = {
        "model_type": model_type, "architectures": [f"{classes}ForConditionalGeneration"],
        "image_token_id": ids["<image>"], "scale_factor": 2, "vocab_size": ids["vocab"],
        "eos_token_id": [ids["<end_of_utterance>"]], "text_config": text,
        "vision_config": vision,
    }  # fmt: skip
    model_config = cfg.ModelConfig.from_dict(config)
    model_config.text_config = cfg.TextConfig.from_dict(text)
    model_config.vision_config = cfg.VisionConfig.from_dict(vision)
    _save(path, module.Model(model_config), config, seed)


MISTRAL3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message.role == 'user' %}[INST]{% endif %}"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}[IMG]{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message.role == 'user' %}[/INST]{% else %}{{ eos_token }}{% endif %}{% endfor %}"
)


def _mistral3(path: Path, seed: int, model_type: str = "mistral3") -> None:
    """Mistral 3 (Pixtral tower, patches merged 2x2), or Pixtral itself (`pixtral`: no merge)."""
    import importlib

    from mlx_vlm.models.pixtral import VisionConfig

    cfg = importlib.import_module(f"mlx_vlm.models.{model_type}.config")
    module = importlib.import_module(f"mlx_vlm.models.{model_type}.{model_type}")
    merge = 2 if model_type == "mistral3" else 1

    specials = ["<s>", "</s>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
    ids = _tokenizer(path, specials, MISTRAL3_TEMPLATE, {
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<|endoftext|>",
    })  # fmt: skip
    _write(path / "preprocessor_config.json", {
        "image_processor_type": "PixtralImageProcessor", "processor_class": "PixtralProcessor",
        "size": {"longest_edge": 32}, "patch_size": {"height": 8 // merge, "width": 8 // merge},
        "do_resize": True, "resample": 3, "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": _HALF, "image_std": _HALF, "do_convert_rgb": True,
    })  # fmt: skip
    _write(path / "processor_config.json", {
        "processor_class": "PixtralProcessor", "patch_size": 8 // merge,
        "spatial_merge_size": merge,
        "image_token": "[IMG]", "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]",
    })  # fmt: skip
    text = {"model_type": "mistral", **_TEXT, "head_dim": 16, "rms_norm_eps": 1e-5,
            "vocab_size": ids["vocab"], "rope_theta": 1e4,
            "max_position_embeddings": 2048}  # fmt: skip
    vision = {"model_type": "pixtral", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 4, "head_dim": 8,
              "patch_size": 8 // merge, "image_size": 32}  # fmt: skip
    config = {
        "model_type": model_type,
        "architectures": [f"{model_type.capitalize()}ForConditionalGeneration"],
        "image_token_index": ids["[IMG]"], "spatial_merge_size": merge,
        "vision_feature_layer": -1, "vocab_size": ids["vocab"], "eos_token_id": [ids["</s>"]],
        "text_config": text, "vision_config": vision,
    }  # fmt: skip
    model_config = cfg.ModelConfig.from_dict(config)
    model_config.text_config = cfg.TextConfig.from_dict(text)
    model_config.vision_config = VisionConfig.from_dict(vision)
    _save(path, module.Model(model_config), config, seed)


def _llava_next(path: Path, seed: int) -> None:
    from mlx_vlm.models.llava_next import config as cfg
    from mlx_vlm.models.llava_next import llava_next

    from tests.vision_checkpoints import VISION_TEMPLATE

    ids = _tokenizer(path, ["<image>"], VISION_TEMPLATE, {
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
    })  # fmt: skip
    pinpoints = [[28, 56], [56, 28], [56, 56]]
    _write(path / "preprocessor_config.json", {
        "image_processor_type": "LlavaNextImageProcessor",
        "processor_class": "LlavaNextProcessor", "image_grid_pinpoints": pinpoints,
        "do_resize": True, "size": {"shortest_edge": 28},
        "do_center_crop": True, "crop_size": {"height": 28, "width": 28}, "do_pad": True,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
        "image_mean": _HALF, "image_std": _HALF, "do_convert_rgb": True, "resample": 3,
    })  # fmt: skip
    _write(path / "processor_config.json", {
        "processor_class": "LlavaNextProcessor", "patch_size": 14, "image_token": "<image>",
        "vision_feature_select_strategy": "default", "num_additional_image_tokens": 1,
    })  # fmt: skip
    text = {"model_type": "llama", **_TEXT, "rms_norm_eps": 1e-5, "vocab_size": ids["vocab"],
            "rope_theta": 1e4, "max_position_embeddings": 2048}  # fmt: skip
    vision = {"model_type": "clip_vision_model", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 4, "patch_size": 14,
              "image_size": 28, "projection_dim": 32}  # fmt: skip
    config = {
        "model_type": "llava_next", "architectures": ["LlavaNextForConditionalGeneration"],
        "image_token_index": ids["<image>"], "image_grid_pinpoints": pinpoints,
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "vocab_size": ids["vocab"], "eos_token_id": [ids["<|im_end|>"]],
        "text_config": text, "vision_config": vision,
    }  # fmt: skip
    model_config = cfg.ModelConfig.from_dict(config)
    model_config.text_config = cfg.TextConfig.from_dict(text)
    model_config.vision_config = cfg.VisionConfig.from_dict(vision)
    _save(path, llava_next.Model(model_config), config, seed)


FAMILIES: dict[str, Callable[[Path, int], None]] = {
    "gemma3": _gemma3,
    "idefics3": _idefics3,
    "mistral3": _mistral3,
    "smolvlm": lambda path, seed: _idefics3(path, seed, "smolvlm"),
    "pixtral": lambda path, seed: _mistral3(path, seed, "pixtral"),
    "llava_next": _llava_next,
}


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
    return {**{t: tok.token_to_id(t) for t in every}, "vocab": tok.get_vocab_size()}


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
