"""DFlash drafters for tiny Qwen3 targets (issue 27, kind `dflash`), built with mlx-vlm's own
DFlashDraftModel class and written as checkpoints (config.json with `dflash_config`, one
model.safetensors, no tokenizer: a drafter reads the target's):

  make_qwen3_target(path)               a random two-layer Qwen3 (the chat tokenizer)
  make_dflash_drafter(path, target)     a random one-layer drafter for it; `config` overrides
                                        fields (a drafter made for another target)
  make_repeater_pair(path)              a Qwen3 whose greedy next token is the current one,
                                        and a drafter that predicts exactly that (below)

The repeater: one-hot embeddings (the mask token's row is zero), zero attention and MLP
outputs, so every layer's output at a position is its token's one-hot and the target
repeats its last token. The drafter's mask positions have zero queries, so they attend
evenly to the context (fc passes the first tapped layer's state through) and the block's
first token; value and output projections are identities, its MLP adds nothing: each draft
is the most frequent token among the row's context and next token. Its drafts are all
accepted only when every row reads its own hidden states at the positions it kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checkpoints import make_checkpoint

LAYERS = 2
TARGET_LAYER_IDS = [0, 1]
BLOCK_SIZE = 8  # at most 7 drafts per forward


def _qwen3_config(
    path: Path, hidden: int, heads: int, tied: bool, vocab: int = 512
) -> dict[str, Any]:
    make_checkpoint(path, "chat", vocab_size=vocab)  # the tokenizer; the model is replaced
    old = json.loads((path / "config.json").read_text())
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": hidden, "num_hidden_layers": LAYERS, "intermediate_size": 16,
        "num_attention_heads": heads, "num_key_value_heads": heads,
        "head_dim": hidden // heads, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "vocab_size": old["vocab_size"], "max_position_embeddings": 2048,
        "tie_word_embeddings": tied, "torch_dtype": "float32",
        "eos_token_id": old["eos_token_id"],
    }  # fmt: skip


def _save(path: Path, config: dict[str, Any], weights: dict[str, Any]) -> Path:
    import mlx.core as mx

    for f in path.glob("*.safetensors"):
        f.unlink()
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def _model_weights(config: dict[str, Any], seed: int, fill: str) -> dict[str, Any]:
    """Qwen3 parameters: random (0.5 normal, norms 1) or `zeros` (norms 1)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    mx.random.seed(seed)
    args = qwen3.ModelArgs.from_dict(config)
    params = tree_flatten(qwen3.Model(args).parameters())
    if fill == "zeros":
        return {k: mx.ones(v.shape) if "norm" in k else mx.zeros(v.shape) for k, v in params}
    return {k: v if "norm" in k else 0.5 * mx.random.normal(v.shape) for k, v in params}


def make_qwen3_target(path: Path, seed: int = 0) -> Path:
    """A random two-layer Qwen3 (hidden 64) with the chat checkpoint's tokenizer."""
    config = _qwen3_config(path, 64, 4, tied=True)
    return _save(path, config, _model_weights(config, seed, "random"))


def drafter_config(target: Path, **overrides: Any) -> dict[str, Any]:
    """A one-layer DFlash drafter's config.json for the target at `target`."""
    t = json.loads((target / "config.json").read_text())
    config: dict[str, Any] = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": t["hidden_size"], "num_hidden_layers": 1, "intermediate_size": 32,
        "num_attention_heads": t["num_attention_heads"],
        "num_key_value_heads": t["num_attention_heads"],
        "head_dim": t["hidden_size"] // t["num_attention_heads"], "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "vocab_size": t["vocab_size"], "block_size": BLOCK_SIZE,
        "tie_word_embeddings": True,
        "dflash_config": {
            "mask_token_id": t["vocab_size"] - 1, "target_layer_ids": TARGET_LAYER_IDS,
        },
    }  # fmt: skip
    for key, value in overrides.items():
        if key in ("mask_token_id", "target_layer_ids"):
            config["dflash_config"][key] = value
        else:
            config[key] = value
    return config


def _drafter_weights(config: dict[str, Any], seed: int) -> dict[str, Any]:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.speculative.drafters.qwen3_dflash import DFlashDraftModel, ModelConfig

    mx.random.seed(seed)
    params = tree_flatten(DFlashDraftModel(ModelConfig.from_dict(config)).parameters())
    return {k: v if "norm" in k else 0.3 * mx.random.normal(v.shape) for k, v in params}


def make_dflash_drafter(path: Path, target: Path, seed: int = 1, **config: Any) -> Path:
    """A random DFlash drafter for the target at `target`; `config` overrides fields
    (hidden_size, vocab_size, target_layer_ids, ...) to make one for another target."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = drafter_config(target, **config)
    return _save(path, cfg, _drafter_weights(cfg, seed))


def make_repeater_pair(path: Path, *, spread: bool = False) -> tuple[Path, Path]:
    """(target, drafter) under `path` (module docstring). `spread`: the target's head gives
    the current token 1.0 and the two ids after it 0.5 and 0.25 (sampled at temperature 0.8
    over the top 3, the drafted repeat is drawn about half the time)."""
    import mlx.core as mx
    import numpy as np

    target = path / "repeater"
    target.mkdir(parents=True, exist_ok=True)
    config = _qwen3_config(target, 64, 4, tied=not spread, vocab=200)  # 263 ids: the least
    vocab = config["vocab_size"]
    hidden = -(-vocab // 64) * 64
    config.update(hidden_size=hidden, head_dim=hidden // 4)
    weights = _model_weights(config, 0, "zeros")
    embed = np.eye(vocab, hidden, dtype=np.float32)
    embed[vocab - 1] = 0.0  # the drafter's mask token: zero queries, keys and values
    weights["model.embed_tokens.weight"] = mx.array(embed)
    if spread:
        head = np.zeros((vocab, hidden), dtype=np.float32)
        for shift, logit in ((0, 1.0), (1, 0.5), (2, 0.25)):
            rows = [(t + shift) % vocab for t in range(vocab)]
            head[rows, np.arange(vocab)] = logit / np.sqrt(hidden)  # the norm scales by sqrt(H)
        weights["lm_head.weight"] = mx.array(head)
    _save(target, config, weights)
    drafter = path / "repeater-dflash"
    drafter.mkdir(parents=True, exist_ok=True)
    dcfg = drafter_config(target)
    dweights = {k: mx.zeros(v.shape) for k, v in _drafter_weights(dcfg, 0).items()}
    for k in dweights:
        if "norm" in k:
            dweights[k] = mx.ones(dweights[k].shape)
    eye = mx.eye(hidden)
    dweights["fc.weight"] = mx.concatenate([eye, mx.zeros((hidden, hidden))], axis=1)
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        dweights[f"layers.0.self_attn.{proj}.weight"] = eye
    _save(drafter, dcfg, dweights)
    return target, drafter
