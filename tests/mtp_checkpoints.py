"""MTP heads for the tiny test checkpoints (issue 27), written as the `mtp.*` tensors of an
`mtp.safetensors` beside the model (the Qwen3-Next / Qwen3.5 names):

  add_mtp_head(path)              random weights shaped for the model at `path`
  add_mtp_head(path, shapes=...)  the same with some tensors reshaped (a head that does not fit)
  make_successor_checkpoint(path) a llama whose greedy next token is succ(current token), with
                                  a head computing the same function (it predicts exactly)
  make_nextn_checkpoint(path, f)  a GLM-4 MoE or DeepSeek-V3 whose random next-token layer sits
                                  in its own safetensors at model.layers.<num_hidden_layers>
                                  (enorm, hnorm, eh_proj, shared_head, experts apart)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.checkpoints import make_checkpoint

SIDECAR = "mtp.safetensors"


def _head_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """`mtp.*` name -> shape of a head fitting the model at `path`: its last attention
    layer's tensors under mtp.layers.0, fc (hidden x 2 hidden), the norms."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load_model

    model, config = load_model(path)
    hidden = config.get("text_config", config)["hidden_size"]
    layer = next(layer for layer in reversed(model.layers) if "self_attn" in layer)
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


_NEXTN_FAMILIES = {
    "glm4_moe": dict(
        intermediate_size=128, head_dim=16, use_qk_norm=True, attention_bias=True,
        partial_rotary_factor=0.5,
    ),
    "deepseek_v3": dict(
        intermediate_size=128, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, topk_method="noaux_tc", scoring_func="sigmoid",
        moe_layer_freq=1, attention_bias=False,
    ),
}  # fmt: skip


def make_nextn_checkpoint(
    path: Path, family: str = "glm4_moe", *, sidecar: bool = False, seed: int = 0
) -> Path:
    """A two-layer MoE of mlx-lm's `family` (glm4_moe or deepseek_v3: a dense first layer,
    then a sparse one), its weights random, with a next-token layer as HF ships one: an MoE
    decoder layer's tensors (experts apart; DeepSeek's attention with its kv_b_proj, which
    mlx-lm's sanitize splits) plus enorm, hnorm, eh_proj, shared_head.norm and the repeated
    embeddings / lm_head, under model.layers.2 of model.safetensors (`sidecar`: of an
    mtp.safetensors beside it; mlx-lm's deepseek_v3 drops model.layers.61 only, so a tiny
    one carries its head so). Returns path."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    make_checkpoint(path, "chat")
    config = json.loads((path / "config.json").read_text())
    hidden = 64
    config.update(
        model_type=family, hidden_size=hidden, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, n_group=1, topk_group=1,
        n_shared_experts=1, n_routed_experts=4, num_experts_per_tok=2,
        routed_scaling_factor=1.0, first_k_dense_replace=1, norm_topk_prob=True,
        rms_norm_eps=1e-5, rope_theta=1e4, rope_scaling=None, tie_word_embeddings=False,
        num_nextn_predict_layers=1, **_NEXTN_FAMILIES[family],
    )  # fmt: skip
    module = importlib.import_module(f"mlx_lm.models.{family}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = {k: _random(k, v.shape) for k, v in tree_flatten(model.parameters())}
    nextn = "model.layers.2."
    for key, value in list(weights.items()):
        if key.startswith("model.layers.1."):  # the head's layer: shaped as the MoE one
            weights.update(_apart(nextn + key.removeprefix("model.layers.1."), value))
    if family == "deepseek_v3":  # HF ships kv_b_proj; mlx-lm's sanitize splits it
        for part in ("embed_q", "unembed_out"):
            del weights[f"{nextn}self_attn.{part}.weight"]
        rows = config["num_attention_heads"] * (config["qk_nope_head_dim"] + config["v_head_dim"])
        kv_b = _random("kv_b_proj.weight", (rows, config["kv_lora_rank"]))
        weights[f"{nextn}self_attn.kv_b_proj.weight"] = kv_b
    for name in ("enorm", "hnorm", "shared_head.norm"):
        weights[f"{nextn}{name}.weight"] = _random(name + ".weight", (hidden,))
    weights[f"{nextn}eh_proj.weight"] = _random("eh_proj.weight", (hidden, 2 * hidden))
    weights[f"{nextn}embed_tokens.weight"] = weights["model.embed_tokens.weight"]
    weights[f"{nextn}shared_head.head.weight"] = weights["lm_head.weight"]
    for f in path.glob("*.safetensors"):
        f.unlink()
    if sidecar:
        head = {k: weights.pop(k) for k in [k for k in weights if k.startswith(nextn)]}
        mx.save_safetensors(str(path / SIDECAR), head)
    mx.save_safetensors(str(path / "model.safetensors"), weights, metadata={"format": "mlx"})
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def _random(name: str, shape: tuple[int, ...]):  # noqa: ANN202 (an mx.array)
    import mlx.core as mx

    return mx.ones(shape) if _is_norm(name) else 0.3 * mx.random.normal(shape)


def _apart(key: str, value):  # noqa: ANN001, ANN202
    """HF's names for one of mlx-lm's tensors: stacked experts come apart, one per expert."""
    if ".mlp.switch_mlp." not in key:
        return {key: value}
    head, proj = key.split(".mlp.switch_mlp.")
    return {f"{head}.mlp.experts.{e}.{proj}": value[e] for e in range(value.shape[0])}
