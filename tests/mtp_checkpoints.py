"""MTP heads for the tiny test checkpoints (issue 27), written as the `mtp.*` tensors of an
`mtp.safetensors` beside the model (the Qwen3-Next / Qwen3.5 names):

  add_mtp_head(path)              random weights shaped for the model at `path`
  add_mtp_head(path, shapes=...)  the same with some tensors reshaped (a head that does not fit)
  make_successor_checkpoint(path) a llama whose greedy next token is succ(current token), with
                                  a head computing the same function (it predicts exactly)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.checkpoints import make_checkpoint

SIDECAR = "mtp.safetensors"


def _head_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """`mtp.*` name -> shape of a head fitting the model at `path`: its first attention
    layer's tensors under mtp.layers.0, fc (hidden x 2 hidden), the norms."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model

    model, config = load_model(path)
    hidden = config.get("text_config", config)["hidden_size"]
    layer = next(layer for layer in model.layers if "self_attn" in layer)
    shapes = {f"mtp.layers.0.{k}": tuple(v.shape) for k, v in tree_flatten(layer.parameters())}
    shapes["mtp.fc.weight"] = (hidden, 2 * hidden)
    for norm in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        shapes[f"mtp.{norm}.weight"] = (hidden,)
    return shapes


def add_mtp_head(
    path: Path,
    *,
    seed: int = 0,
    shapes: dict[str, tuple[int, ...]] | None = None,
    like: Path | None = None,
) -> Path:
    """Write a random head beside the model at `path` (norm weights 1, or 0 on the families
    that store zero-centred norms); `shapes` overrides some tensors' shapes; `like`: shaped
    for that checkpoint instead (a float head beside a quantized copy). Returns path."""
    import mlx.core as mx

    mx.random.seed(seed)
    model_type = json.loads((path / "config.json").read_text())["model_type"]
    one = 0.0 if model_type in ("qwen3_next", "qwen3_5") else 1.0
    weights = {}
    for name, shape in {**_head_shapes(like or path), **(shapes or {})}.items():
        if _is_norm(name):
            weights[name] = mx.full(shape, one)
        else:
            weights[name] = 0.2 * mx.random.normal(shape)
    mx.save_safetensors(str(path / SIDECAR), weights)
    return path


def _is_norm(name: str) -> bool:
    parts = name.split(".")
    return parts[-1] == "weight" and "norm" in parts[-2]


def copy_with_head(source: Path, path: Path, **options: object) -> Path:
    """A copy of the checkpoint at `source` with a random head added (add_mtp_head)."""
    shutil.copytree(source, path)
    return add_mtp_head(path, **options)  # type: ignore[arg-type]


def successor(token: int, vocab: int) -> int:
    return (5 * token + 1) % vocab  # a permutation: 5 and the tiny vocabulary are coprime


def make_successor_checkpoint(path: Path, *, spread: bool = False) -> Path:
    """A one-layer llama (identity embeddings, zero attention and MLP outputs: the residual
    at each position is its one-hot token) whose lm_head maps each token to successor(),
    and a head that predicts the token after next by the same map. `spread`: the logits
    give successor() 1.0, the two ids after it 0.5 and 0.25, the rest 0 (sampled at
    temperature 0.8 over the top 3, successor() is drawn about half the time). Returns
    `path`."""
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    make_checkpoint(path, "chat")
    config = json.loads((path / "config.json").read_text())
    vocab = config["vocab_size"]
    hidden = -(-vocab // 64) * 64
    config.update(
        hidden_size=hidden, num_hidden_layers=1, intermediate_size=16,
        num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False,
    )  # fmt: skip
    skip = ("architectures", "torch_dtype", "eos_token_id")
    model = llama.Model(llama.ModelArgs(**{k: v for k, v in config.items() if k not in skip}))
    weights = {k: mx.zeros(v.shape) for k, v in tree_flatten(model.parameters())}
    for k in weights:
        if "norm" in k:
            weights[k] = mx.ones(weights[k].shape)
    weights["model.embed_tokens.weight"] = mx.eye(vocab, hidden)
    succ = np.zeros((vocab, hidden), dtype=np.float32)
    scale = 1 / np.sqrt(hidden) if spread else 1.0  # the final norm scales a one-hot by sqrt(H)
    for shift, logit in ((0, 1.0), (1, 0.5), (2, 0.25)) if spread else ((0, 1.0),):
        rows = [(successor(t, vocab) + shift) % vocab for t in range(vocab)]
        succ[rows, np.arange(vocab)] = logit * scale
    weights["lm_head.weight"] = mx.array(succ)
    for f in path.glob("*.safetensors"):
        f.unlink()
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    head = {}
    for name, shape in _head_shapes(path).items():
        head[name] = mx.ones(shape) if _is_norm(name) else mx.zeros(shape)
    # fc passes the embedding of token t+1 through; the layer adds nothing (zero outputs).
    head["mtp.fc.weight"] = mx.concatenate([mx.eye(hidden), mx.zeros((hidden, hidden))], axis=1)
    mx.save_safetensors(str(path / SIDECAR), head)
    return path


def unstack_experts(path: Path) -> Path:
    """Rewrite the head beside `path` with its MoE experts apart, as HF ships them
    (`mtp.layers.0.mlp.experts.<e>.<proj>.weight` for mlx-lm's stacked switch_mlp)."""
    import mlx.core as mx

    weights = dict(mx.load(str(path / SIDECAR)))
    for name in [n for n in weights if ".mlp.switch_mlp." in n]:
        stacked = weights.pop(name)
        head, proj = name.split(".mlp.switch_mlp.")
        for e in range(stacked.shape[0]):
            weights[f"{head}.mlp.experts.{e}.{proj}"] = stacked[e]
    mx.save_safetensors(str(path / SIDECAR), weights)
    return path
