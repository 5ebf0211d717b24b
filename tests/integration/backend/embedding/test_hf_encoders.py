"""The encoder families mlxd reads from Hugging Face's own layout, against numpy reference
forwards written here from the architectures' definitions (transformers' RobertaModel,
nomic's NomicBertModel): RoBERTa through mlx-embeddings' XLM-R class, nomic-bert through
mlxd's own network. Each text is embedded inside one right-padded batch by mlxd and alone by
the reference, so this checks the network and alone == batched at once."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mlxd.backend.loader import load_checkpoint
from mlxd.errors import ModelBroken
from mlxd.store.health import check
from tests.hf_encoder_checkpoints import HEADS, make_nomic, make_roberta, weights

# mlxd computes in float32, the references in float64; on unit vectors of 32 components the
# difference is float32 rounding (measured 1.1e-7 at most): 1e-5 per component.
TOLERANCE = 1e-5
TEXTS = [
    "The capital of France is Paris.",
    "a dog",
    "the quick brown fox jumps over the lazy dog",
]


def _layer_norm(x: np.ndarray, w: dict[str, np.ndarray], name: str, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _linear(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    out = x @ w[f"{name}.weight"].T
    return out + w[f"{name}.bias"] if f"{name}.bias" in w else out


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(heads, tokens, head_dim) each -> (tokens, heads * head_dim); no padding (one row)."""
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return (probs @ v).transpose(1, 0, 2).reshape(q.shape[1], -1)


def _heads(x: np.ndarray) -> np.ndarray:
    return x.reshape(x.shape[0], HEADS, -1).transpose(1, 0, 2)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def roberta_reference(w: dict[str, np.ndarray], config: dict, ids: list[int]) -> np.ndarray:
    """RobertaModel's last hidden state of one unpadded row."""
    eps, pad = config["layer_norm_eps"], config["pad_token_id"]
    x = np.array(ids)
    positions = np.arange(1, len(ids) + 1) + pad  # no padding: cumsum of ones, from pad + 1
    h = (
        w["embeddings.word_embeddings.weight"][x]
        + w["embeddings.position_embeddings.weight"][positions]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    h = _layer_norm(h, w, "embeddings.LayerNorm", eps)
    for i in range(config["num_hidden_layers"]):
        at = f"encoder.layer.{i}.attention"
        q, k, v = (_heads(_linear(h, w, f"{at}.self.{n}")) for n in ("query", "key", "value"))
        a = _layer_norm(_linear(_attention(q, k, v), w, f"{at}.output.dense") + h, w,
                        f"{at}.output.LayerNorm", eps)  # fmt: skip
        inner = _gelu(_linear(a, w, f"encoder.layer.{i}.intermediate.dense"))
        h = _layer_norm(_linear(inner, w, f"encoder.layer.{i}.output.dense") + a, w,
                        f"encoder.layer.{i}.output.LayerNorm", eps)  # fmt: skip
    return h


def _rotary(x: np.ndarray, config: dict) -> np.ndarray:
    """The rotation of the first rotary_emb_fraction of each head's dims: GPT-NeoX style
    (first half with second half), or interleaved pairs."""
    dims = int(x.shape[-1] * config["rotary_emb_fraction"])
    inv = 1.0 / config["rotary_emb_base"] ** (np.arange(0, dims, 2) / dims)
    angles = np.arange(x.shape[1])[:, None] * inv[None]
    cos, sin = np.cos(angles), np.sin(angles)
    if config["rotary_emb_interleaved"]:  # GPT-J style: pairs (0, 1), (2, 3), ...
        out = x.copy()
        x1, x2 = x[..., 0:dims:2], x[..., 1:dims:2]
        out[..., 0:dims:2], out[..., 1:dims:2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return out
    x1, x2, rest = x[..., : dims // 2], x[..., dims // 2 : dims], x[..., dims:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], axis=-1)


def nomic_reference(w: dict[str, np.ndarray], config: dict, ids: list[int]) -> np.ndarray:
    """NomicBertModel's last hidden state of one unpadded row (post-norm, SwiGLU)."""
    eps = config["layer_norm_epsilon"]
    h = w["embeddings.word_embeddings.weight"][np.array(ids)]
    h = _layer_norm(h + w["embeddings.token_type_embeddings.weight"][0], w, "emb_ln", eps)
    for i in range(config["n_layer"]):
        layer = f"encoder.layers.{i}"
        q, k, v = np.split(_linear(h, w, f"{layer}.attn.Wqkv"), 3, axis=-1)
        q, k, v = _rotary(_heads(q), config), _rotary(_heads(k), config), _heads(v)
        h = _layer_norm(h + _linear(_attention(q, k, v), w, f"{layer}.attn.out_proj"), w,
                        f"{layer}.norm1", eps)  # fmt: skip
        up, gate = _linear(h, w, f"{layer}.mlp.fc11"), _linear(h, w, f"{layer}.mlp.fc12")
        mlp = _linear(up * gate / (1 + np.exp(-gate)), w, f"{layer}.mlp.fc2")  # up * silu(gate)
        h = _layer_norm(h + mlp, w, f"{layer}.norm2", eps)
    return h


def _mean_normalized(hidden: np.ndarray) -> np.ndarray:
    pooled = hidden.mean(0)
    return pooled / np.linalg.norm(pooled)


def _make_interleaved_nomic(path: Path) -> Path:
    make_nomic(path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "rotary_emb_interleaved": True}))
    return path


FAMILIES = {
    "roberta": (make_roberta, roberta_reference),
    "nomic": (make_nomic, nomic_reference),
    "nomic-interleaved": (_make_interleaved_nomic, nomic_reference),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_batch_equals_the_reference_of_each_row_alone(tmp_path: Path, family: str) -> None:
    make, reference = FAMILIES[family]
    path = make(tmp_path / family)
    loaded = load_checkpoint(path)  # nomic's auto_map is no refusal: its code never runs
    assert loaded.embedder is not None and loaded.embedder.dimensions == 32
    rows = [loaded.tokenizer.encode(t) for t in TEXTS]
    assert len({len(r) for r in rows}) == len(rows)  # the batch pads each row differently
    got = np.array(loaded.embedder.embed(rows))
    w = {k: v.astype(np.float64) for k, v in weights(path).items()}
    config = loaded.config
    want = np.stack([_mean_normalized(reference(w, config, r)) for r in rows])
    assert np.abs(got - want).max() <= TOLERANCE
    assert np.abs(want[0] - want[1]).max() > 0.01  # the texts differ


def _nomic_matryoshka(pooled: np.ndarray, dims: int) -> np.ndarray:
    """nomic-embed-text v1.5's model card recipe: a weightless layer norm over the full
    mean-pooled vector (torch's eps), the first `dims` components, unit length."""
    normed = (pooled - pooled.mean()) / np.sqrt(pooled.var() + 1e-5)
    head = normed[:dims]
    return head / np.linalg.norm(head)


def test_dimensions_of_nomic_bert_follow_its_model_card_and_roberta_just_cuts(
    tmp_path: Path,
) -> None:
    """The card layer-norms the raw mean pool; mlxd's vectors come normalized, which only
    scales what the layer norm sees, and the rescaling after the cut removes that scale."""
    from mlxd.chat.embedding import cut_vector

    for family, dims in (("nomic", 16), ("roberta", 16), ("nomic", 32)):
        make, reference = FAMILIES[family]
        path = make(tmp_path / f"{family}-{dims}")
        loaded = load_checkpoint(path)
        assert loaded.embedder is not None
        spec = loaded.embedder.spec
        assert spec.layer_norm_cut is (family == "nomic")
        rows = [loaded.tokenizer.encode(t) for t in TEXTS]
        got = np.array([cut_vector(v, dims, spec) for v in loaded.embedder.embed(rows)])
        w = {k: v.astype(np.float64) for k, v in weights(path).items()}
        pooled = [reference(w, loaded.config, r).mean(0) for r in rows]
        if family == "nomic":
            want = np.stack([_nomic_matryoshka(p, dims) for p in pooled])
            plain = np.stack([p[:dims] / np.linalg.norm(p[:dims]) for p in pooled])
            assert np.abs(want - plain).max() > 100 * TOLERANCE  # the layer norm matters
        else:
            want = np.stack([p[:dims] / np.linalg.norm(p[:dims]) for p in pooled])
        assert np.abs(got - want).max() <= TOLERANCE


def test_windows_and_health(tmp_path: Path) -> None:
    """RoBERTa's window leaves out its pad + 1 offset; nomic's is n_positions, and its shipped
    auto_map is not refused by health since mlxd never runs it."""
    roberta, nomic = make_roberta(tmp_path / "r"), make_nomic(tmp_path / "n")
    assert load_checkpoint(roberta).context_window == 38
    assert load_checkpoint(nomic).context_window == 128
    for path in (roberta, nomic):
        report = check(path, deep=True)
        assert report.ok, report.problems


@pytest.mark.parametrize(
    ("family", "change", "says"),
    [
        ("roberta", {"hidden_act": "gelu_new"}, "hidden_act 'gelu_new'"),
        ("roberta", {"position_embedding_type": "relative_key"}, "not absolute"),
        ("nomic", {"prenorm": True}, "prenorm"),
        ("nomic", {"activation_function": "gelu"}, "not a gated MLP"),
        ("nomic", {"rotary_emb_fraction": 0.0}, "rotary_emb_fraction"),
    ],
)
def test_a_variant_the_class_does_not_compute_is_refused(
    tmp_path: Path, family: str, change: dict, says: str
) -> None:
    path = FAMILIES[family][0](tmp_path / family)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **change}))
    report = check(path)
    assert [p.code for p in report.problems] == ["unsupported"]
    assert says in report.problems[0].message
    with pytest.raises(ModelBroken, match=says):
        load_checkpoint(path)


def test_the_gates_the_checkpoint_rules_accept_are_the_network_s() -> None:
    from mlxd.backend.embedding.nomic_bert import _GATES
    from mlxd.checkpoint import NOMIC_GATES

    assert tuple(_GATES) == NOMIC_GATES


def test_an_mlx_quantized_nomic_checkpoint_loads_and_stays_close(tmp_path: Path) -> None:
    """mlx-community's nomic conversions are quantized MLX checkpoints: every quantized layer
    stores weight, scales and biases, and config.json says `quantization`."""
    import mlx.core as mx
    from mlx.nn.layers.quantized import quantize
    from mlx.utils import tree_flatten

    from mlxd.backend.embedding.nomic_bert import load_nomic_bert

    source = make_nomic(tmp_path / "float")
    config = json.loads((source / "config.json").read_text())
    model = load_nomic_bert(source, config)
    quantize(model, 32, 8)
    quantized = make_nomic(tmp_path / "q8")
    flat = dict(tree_flatten(model.parameters()))
    assert "encoder.layers.0.attn.Wqkv.scales" in flat
    mx.save_safetensors(str(quantized / "model.safetensors"), flat)
    q_config = {**config, "quantization": {"group_size": 32, "bits": 8}}
    (quantized / "config.json").write_text(json.dumps(q_config))
    a, b = load_checkpoint(source), load_checkpoint(quantized)
    assert a.embedder is not None and b.embedder is not None
    rows = [a.tokenizer.encode(t) for t in TEXTS]
    exact, close = np.array(a.embedder.embed(rows)), np.array(b.embedder.embed(rows))
    assert np.abs(exact - close).max() > 0  # it did run quantized
    assert (exact * close).sum(-1).min() >= 0.99  # cosine of unit vectors, 8 bits
