"""nomic-bert (nomic-embed-text v1 / v1.5, nomic-bert-2048): mlxd's own network for it, in
mlx.nn, reading nomic's Hugging Face weights as they are. No library serves it (mlx-embeddings
0.1.0 has no class) and its checkpoint's own code is never run.

The network: word (+ token type) embeddings, `emb_ln`, then post-norm blocks of fused-QKV
attention with rotary positions on `rotary_emb_fraction` of each head (`Wqkv`, `out_proj`),
`norm1`, a gated MLP (`fc11` * act(`fc12`), then `fc2`), `norm2`. Config keys are GPT-2's
(n_embd, n_head, n_layer, n_inner, layer_norm_epsilon) plus nomic's; the variants it does not
compute are refused by mlxd.checkpoint.encoder_refusal before it is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
from mlx.nn.layers.activations import gelu, silu
from mlx.nn.layers.base import Module
from mlx.nn.layers.embedding import Embedding
from mlx.nn.layers.linear import Linear
from mlx.nn.layers.normalization import LayerNorm
from mlx.nn.layers.quantized import quantize

from mlxd.errors import ModelBroken

# nomic's gated MLP rounds its width up to a multiple of this (NomicBertGatedMLP's multiple_of).
_MLP_MULTIPLE = 256
_GATES: dict[str, Callable[[mx.array], mx.array]] = {
    "swiglu": silu,
    "geglu": gelu,
    "glu": mx.sigmoid,
}


@dataclass(frozen=True, slots=True)
class NomicArgs:
    """The sizes and switches of a nomic-bert config.json, with nomic's defaults."""

    hidden: int
    heads: int
    layers: int
    mlp: int
    vocab: int
    type_vocab: int
    eps: float
    rotary_dims: int
    rotary_base: float
    interleaved: bool
    gate: str
    qkv_bias: bool
    fc1_bias: bool
    fc2_bias: bool

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> NomicArgs:
        def num(key: str, default: float) -> float:
            value = config.get(key)
            return float(value) if isinstance(value, int | float) else default

        hidden, heads = int(num("n_embd", 768)), int(num("n_head", 12))
        inner = int(num("n_inner", 0)) or int(8 * hidden / 3)  # nomic's default width
        multiple = int(num("pad_vocab_size_multiple", 1)) or 1
        return cls(
            hidden=hidden,
            heads=heads,
            layers=int(num("n_layer", 12)),
            mlp=-(-inner // _MLP_MULTIPLE) * _MLP_MULTIPLE,
            vocab=-(-int(num("vocab_size", 30528)) // multiple) * multiple,
            type_vocab=int(num("type_vocab_size", 2)),
            eps=num("layer_norm_epsilon", 1e-5),
            rotary_dims=int(hidden // heads * num("rotary_emb_fraction", 0.0)),
            rotary_base=num("rotary_emb_base", 10_000.0),
            interleaved=bool(config.get("rotary_emb_interleaved", False)),
            gate=str(config.get("activation_function", "swiglu")),
            qkv_bias=bool(config.get("qkv_proj_bias", True)),
            fc1_bias=bool(config.get("mlp_fc1_bias", True)),
            fc2_bias=bool(config.get("mlp_fc2_bias", True)),
        )


class _Attention(Module):
    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.args = args
        self.Wqkv = Linear(args.hidden, 3 * args.hidden, bias=args.qkv_bias)
        self.out_proj = Linear(args.hidden, args.hidden, bias=args.qkv_bias)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        a = self.args
        rows, width, _ = x.shape
        head = a.hidden // a.heads
        # Wqkv's output is (three, heads, head_dim): q, k, v each heads-major.
        qkv = self.Wqkv(x).reshape(rows, width, 3, a.heads, head).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        # Each row counts positions from 0, so a right-padded row sees what it sees alone.
        q, k = (
            mx.fast.rope(
                t, a.rotary_dims, traditional=a.interleaved, base=a.rotary_base, scale=1.0, offset=0
            )
            for t in (q, k)
        )
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(head), mask=mask)
        return self.out_proj(out.transpose(0, 2, 1, 3).reshape(rows, width, a.hidden))


class _GatedMLP(Module):
    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.gate = _GATES[args.gate]
        self.fc11 = Linear(args.hidden, args.mlp, bias=args.fc1_bias)
        self.fc12 = Linear(args.hidden, args.mlp, bias=args.fc1_bias)
        self.fc2 = Linear(args.mlp, args.hidden, bias=args.fc2_bias)

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc2(self.fc11(x) * self.gate(self.fc12(x)))  # the gate is fc12's


class _Block(Module):
    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.attn = _Attention(args)
        self.mlp = _GatedMLP(args)
        self.norm1 = LayerNorm(args.hidden, eps=args.eps)
        self.norm2 = LayerNorm(args.hidden, eps=args.eps)

    def __call__(self, x: mx.array, mask: mx.array) -> mx.array:
        x = self.norm1(x + self.attn(x, mask))
        out: mx.array = self.norm2(x + self.mlp(x))
        return out


class _Embeddings(Module):
    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.word_embeddings = Embedding(args.vocab, args.hidden)
        if args.type_vocab > 0:
            self.token_type_embeddings = Embedding(args.type_vocab, args.hidden)

    def __call__(self, ids: mx.array) -> mx.array:
        out: mx.array = self.word_embeddings(ids)
        if "token_type_embeddings" in self:
            out = out + self.token_type_embeddings(mx.array([0]))  # one segment: type 0
        return out


class _Encoder(Module):
    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.layers = [_Block(args) for _ in range(args.layers)]


class NomicBert(Module):
    """(token ids, mask) of a right-padded batch -> (rows, tokens, n_embd) hidden states."""

    def __init__(self, args: NomicArgs) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.embeddings = _Embeddings(args)
        self.emb_ln = LayerNorm(args.hidden, eps=args.eps)
        self.encoder = _Encoder(args)

    def __call__(self, ids: mx.array, mask: mx.array) -> mx.array:
        x: mx.array = self.emb_ln(self.embeddings(ids))
        keys = (mask > 0)[:, None, None, :]  # a padded key is seen by no query
        for layer in self.encoder.layers:
            x = layer(x, keys)
        return x


def load_nomic_bert(path: Path, config: Mapping[str, object]) -> NomicBert:
    """The network of the nomic-bert checkpoint at `path` (float, or quantized as its config's
    `quantization` says), every weight checked against it (a missing or extra tensor is a
    ModelBroken naming it)."""
    model = NomicBert(NomicArgs.from_config(config))
    weights: dict[str, mx.array] = {}
    for shard in sorted(path.glob("*.safetensors")):
        weights.update(mx.load(str(shard)))  # type: ignore[arg-type]
    if not weights:
        raise ModelBroken(f"{path.name}: no *.safetensors weights")
    quant = config.get("quantization")
    if isinstance(quant, dict):  # an MLX conversion: each quantized layer stored its scales
        quantize(
            model,
            int(quant.get("group_size", 64)),
            int(quant.get("bits", 4)),
            mode=str(quant.get("mode", "affine")),
            class_predicate=lambda name, _: f"{name}.scales" in weights,
        )
    try:
        model.load_weights(list(_sanitized(weights).items()), strict=True)
    except ValueError as exc:
        raise ModelBroken(f"{path.name}: its weights are not nomic-bert's: {exc}") from exc
    mx.eval(model.parameters())  # type: ignore[no-untyped-call]
    model.eval()
    return model


def _sanitized(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Weights as NomicBert names them: the pooler NomicBertModel may save (mean pooling
    never reads it) and position-id buffers are left out."""
    return {
        key: value
        for key, value in weights.items()
        if not (key.startswith("pooler.") or key.endswith("position_ids"))
    }
