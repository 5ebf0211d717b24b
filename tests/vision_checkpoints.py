"""A tiny random-weight vision checkpoint for tests: mlx-vlm's llava (CLIP vision tower,
llama text model), real processor files (CLIPImageProcessor's preprocessor_config.json,
LlavaProcessor's processor_config.json), the BPE tokenizer of tests/checkpoints.py plus an
`<image>` token, and a ChatML template that writes `<image>` for each image part.
Built in well under a second, never downloaded; needs mlx-vlm (`pip install -e ".[vision]"`).

A 28x28 crop in 14-pixel patches: each image fills 4 prompt positions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checkpoints import SIZES, SPECIAL_TOKENS, train_tokenizer

IMAGE_TOKEN = "<image>"
IMAGE_SIZE = 28
PATCH = 14
IMAGE_POSITIONS = (IMAGE_SIZE // PATCH) ** 2  # CLS dropped ("default" feature strategy)

VISION_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<image>\n"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def make_vision_checkpoint(path: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the checkpoint into `path` (created) and return it."""
    import mlx.core as mx
    from mlx_vlm.models.llava import config as llava_config
    from mlx_vlm.models.llava import llava
    from tokenizers import AddedToken

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(512)
    tok.add_special_tokens([AddedToken(IMAGE_TOKEN, special=True)])
    tok.save(str(path / "tokenizer.json"))
    vocab = tok.get_vocab_size()
    specials = SPECIAL_TOKENS + [IMAGE_TOKEN]
    _write(path / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 2048,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True} for t in specials
        },
        "chat_template": VISION_TEMPLATE,
    })  # fmt: skip
    _write(path / "preprocessor_config.json", {
        "image_processor_type": "CLIPImageProcessor",
        "do_resize": True,
        "size": {"shortest_edge": IMAGE_SIZE},
        "do_center_crop": True,
        "crop_size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": _CLIP_MEAN,
        "image_std": _CLIP_STD,
        "do_convert_rgb": True,
        "resample": 3,
    })  # fmt: skip
    _write(path / "processor_config.json", {
        "processor_class": "LlavaProcessor",
        "patch_size": PATCH,
        "vision_feature_select_strategy": "default",
        "image_token": IMAGE_TOKEN,
        "num_additional_image_tokens": 1,
    })  # fmt: skip
    text = {
        "model_type": "llama",
        **SIZES[size],
        "vocab_size": vocab,
        "rms_norm_eps": 1e-5,
        "rope_theta": 1e4,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    }
    vision = {
        "model_type": "clip_vision_model",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH,
        "projection_dim": 32,
        "layer_norm_eps": 1e-5,
    }
    config = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "image_token_index": tok.token_to_id(IMAGE_TOKEN),
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": vocab,
        "eos_token_id": tok.token_to_id("<|im_end|>"),
        "text_config": text,
        "vision_config": vision,
    }
    model_config = llava_config.ModelConfig.from_dict(config)
    model_config.text_config = llava_config.TextConfig.from_dict(text)
    model_config.vision_config = llava_config.VisionConfig.from_dict(vision)
    mx.random.seed(seed)
    model = llava.Model(model_config)
    return write_random_model(model, path, config)


def write_random_model(model: Any, path: Path, config: dict) -> Path:
    """Give `model` (built after mx.random.seed) larger-than-default random weights, so that
    greedy output varies with the prompt and the image, and write it with `config` into
    `path` as a checkpoint."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    params = tree_flatten(model.parameters())
    model.load_weights(
        [(k, mx.random.normal(v.shape) * 0.5) if "norm" not in k else (k, v) for k, v in params]
    )
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    _write(path / "config.json", config)
    _write(path / "generation_config.json", {"do_sample": False})
    return path


def png_bytes(seed: int = 0, width: int = 40, height: int = 30) -> bytes:
    """A random RGB PNG image (different seeds: different pictures)."""
    import io

    import numpy as np
    from PIL import Image

    pixels = (np.random.RandomState(seed).rand(height, width, 3) * 255).astype("uint8")
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _write(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))
