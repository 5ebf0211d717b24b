"""GGUF llama tensors -> HF/mlx-lm llama weights in one safetensors file.

Names are mapped (blk.N.attn_q -> model.layers.N.self_attn.q_proj, ...), shapes checked
against the hyperparameters before anything is written, blocks dequantized to float32 with
`gguf.quants.dequantize` (or kept as MLX affine quantization, see gguf_quant), q/k
un-permuted back to the HF rotary layout, and each tensor streamed to disk in the requested
dtype so peak memory stays at about one tensor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf.quants import dequantize

from mlxd.errors import InvalidRequest, ModelBroken
from mlxd.store.gguf.hparams import ROPE_FREQS, LlamaHParams
from mlxd.store.gguf.quant import GROUP_SIZE, affine_parts, kept_bits, pack
from mlxd.store.gguf.reader import SUPPORTED_TYPES, GgufFile, GgufTensor

DTYPES = {"float32": ("F32", 4), "float16": ("F16", 2), "bfloat16": ("BF16", 2)}
_TAG_WIDTH = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4}

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.([a-z_]+)\.weight")

ProgressFn = Callable[[int, int, str], None]  # (done, total, tensor name)


@dataclass(frozen=True, slots=True)
class WeightPlan:
    """One output tensor: where it comes from and what it must look like."""

    source: GgufTensor
    target: str
    shape: tuple[int, ...]
    unpermute_heads: int = 0  # >0: undo llama.cpp's q/k rotary permutation with this many heads


def hf_name(gguf_name: str) -> str | None:
    """The HF llama name of a GGUF llama tensor, or None if it is not one."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.fullmatch(gguf_name)
    if m and m.group(2) in _BLOCK_NAMES:
        return f"model.layers.{int(m.group(1))}.{_BLOCK_NAMES[m.group(2)]}.weight"
    return None


def expected_shapes(hp: LlamaHParams) -> dict[str, tuple[int, ...]]:
    """HF name -> numpy shape for every tensor a llama with `hp` has (lm_head only untied)."""
    q_out, kv_out = hp.n_heads * hp.head_dim, hp.n_kv_heads * hp.head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (hp.vocab_size, hp.hidden),
        "model.norm.weight": (hp.hidden,),
    }
    if not hp.tied_embeddings:
        shapes["lm_head.weight"] = (hp.vocab_size, hp.hidden)
    for i in range(hp.n_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (hp.hidden,),
            p + "post_attention_layernorm.weight": (hp.hidden,),
            p + "self_attn.q_proj.weight": (q_out, hp.hidden),
            p + "self_attn.k_proj.weight": (kv_out, hp.hidden),
            p + "self_attn.v_proj.weight": (kv_out, hp.hidden),
            p + "self_attn.o_proj.weight": (hp.hidden, q_out),
            p + "mlp.gate_proj.weight": (hp.ffn, hp.hidden),
            p + "mlp.up_proj.weight": (hp.ffn, hp.hidden),
            p + "mlp.down_proj.weight": (hp.hidden, hp.ffn),
        }
    return shapes


def plan_weights(gguf: GgufFile, hp: LlamaHParams) -> list[WeightPlan]:
    """Check every GGUF tensor against `hp`; raise ModelBroken on anything unexpected."""
    expected = expected_shapes(hp)
    plans: dict[str, WeightPlan] = {}
    for tensor in gguf.tensors.values():
        if tensor.name == ROPE_FREQS:
            continue
        target = hf_name(tensor.name)
        if target is None or target not in expected:
            raise ModelBroken(f"unexpected tensor {tensor.name!r} for a {hp.n_layers}-layer llama")
        if tensor.qtype not in SUPPORTED_TYPES:
            raise ModelBroken(f"tensor {tensor.name} uses unsupported encoding {tensor.qtype.name}")
        if tensor.shape != expected[target]:
            raise ModelBroken(
                f"tensor {tensor.name} has shape {list(tensor.shape)}, "
                f"expected {list(expected[target])}"
            )
        heads = {"q_proj": hp.n_heads, "k_proj": hp.n_kv_heads}.get(target.split(".")[-2], 0)
        plans[target] = WeightPlan(tensor, target, expected[target], heads)
    missing = [name for name in expected if name not in plans]
    if missing:
        raise ModelBroken(f"GGUF file lacks {len(missing)} tensors, e.g. {missing[0]}")
    return [plans[name] for name in expected]


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp convert's `permute`: interleaved rotary pairs -> HF half-split."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp convert's `permute` (HF -> GGUF layout); tests use it to build GGUF files."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_tensor(plan: WeightPlan) -> np.ndarray:
    """Dequantized float32 weights of `plan` in HF layout; ModelBroken if not finite."""
    src = plan.source
    try:
        w = np.asarray(dequantize(src.data, src.qtype), dtype=np.float32)
    except (ValueError, NotImplementedError) as e:
        raise ModelBroken(f"cannot decode tensor {src.name} ({src.qtype.name}): {e}") from e
    if w.shape != plan.shape:
        raise ModelBroken(f"tensor {src.name} decodes to {list(w.shape)}, not {list(plan.shape)}")
    if not np.isfinite(w).all():
        raise ModelBroken(f"tensor {src.name} contains NaN or infinite values")
    return unpermute(w, plan.unpermute_heads) if plan.unpermute_heads else w


def to_dtype(w: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> the bytes of `dtype` (bfloat16 as uint16, rounded to nearest even)."""
    if dtype == "float32":
        return w
    if dtype == "float16":
        return w.astype(np.float16)
    # numpy has no bfloat16: round the float32 bit pattern to its top 16 bits.
    bits = np.ascontiguousarray(w, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


@dataclass(frozen=True, slots=True)
class OutTensor:
    """One safetensors entry: name, shape and safetensors dtype tag (F32/F16/BF16/U32)."""

    name: str
    shape: tuple[int, ...]
    tag: str


def out_tensors(plan: WeightPlan, dtype: str, keep_quantized: bool) -> list[OutTensor]:
    """What `plan` becomes: one weight, or packed weight + scales + biases when kept quantized."""
    tag = DTYPES[dtype][0]
    bits = kept_bits(plan.source.qtype, plan.shape) if keep_quantized else 0
    if not bits:
        return [OutTensor(plan.target, plan.shape, tag)]
    rows, cols = plan.shape
    base = plan.target.removesuffix(".weight")
    groups = (rows, cols // GROUP_SIZE)
    return [
        OutTensor(plan.target, (rows, cols * bits // 32), "U32"),
        OutTensor(f"{base}.scales", groups, tag),
        OutTensor(f"{base}.biases", groups, tag),
    ]


def out_arrays(plan: WeightPlan, dtype: str, keep_quantized: bool) -> list[np.ndarray]:
    """The arrays of `out_tensors(plan, ...)`, in the same order."""
    src = plan.source
    bits = kept_bits(src.qtype, plan.shape) if keep_quantized else 0
    if not bits:
        return [to_dtype(load_tensor(plan), dtype)]
    codes, scales, biases = affine_parts(src.data, src.qtype, plan.shape)
    if heads := plan.unpermute_heads:  # blocks lie within rows: rows move with their groups
        codes, scales, biases = (unpermute(codes, heads), unpermute(scales, heads),
                                 unpermute(biases, heads))  # fmt: skip
    if not (np.isfinite(scales).all() and np.isfinite(biases).all()):
        raise ModelBroken(f"tensor {src.name} has NaN or infinite block scales")
    return [pack(codes, bits), to_dtype(scales, dtype), to_dtype(biases, dtype)]


def quantization_config(plans: list[WeightPlan], keep_quantized: bool) -> dict[str, Any] | None:
    """config.json `quantization` for kept tensors: the common bits plus one entry per layer."""
    per_layer: dict[str, object] = {}
    for plan in plans:
        if len(plan.shape) != 2:
            continue
        bits = kept_bits(plan.source.qtype, plan.shape) if keep_quantized else 0
        layer = plan.target.removesuffix(".weight")
        per_layer[layer] = {"group_size": GROUP_SIZE, "bits": bits} if bits else False
    kept = [v["bits"] for v in per_layer.values() if isinstance(v, dict)]
    if not kept:
        return None
    common = max(set(kept), key=kept.count)
    return {"group_size": GROUP_SIZE, "bits": common, "mode": "affine", **per_layer}


def write_safetensors(
    path: Path,
    plans: list[WeightPlan],
    dtype: str,
    progress: ProgressFn | None = None,
    keep_quantized: bool = False,
) -> int:
    """Stream every planned tensor into `path`; return the number of bytes written.

    Hand-rolled because the safetensors library needs every array in memory at once and
    numpy has no bfloat16; the format is an 8-byte header size, a JSON header, raw data.
    """
    if dtype not in DTYPES:
        raise InvalidRequest(f"unsupported dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    layout = [out_tensors(p, dtype, keep_quantized) for p in plans]
    with path.open("wb") as f:
        f.write(_encode_header([t for entries in layout for t in entries]))
        for done, (plan, entries) in enumerate(zip(plans, layout, strict=True), 1):
            for entry, array in zip(entries, out_arrays(plan, dtype, keep_quantized), strict=True):
                blob = np.ascontiguousarray(array).tobytes()
                assert len(blob) == _nbytes(entry), entry.name  # header and data agree
                f.write(blob)
            if progress:
                progress(done, len(plans), plan.target)
        return f.tell()


def planned_bytes(plans: list[WeightPlan], dtype: str, keep_quantized: bool) -> int:
    """Size of the tensor data `write_safetensors` will write."""
    return sum(_nbytes(t) for p in plans for t in out_tensors(p, dtype, keep_quantized))


def _nbytes(entry: OutTensor) -> int:
    return int(np.prod(entry.shape, dtype=np.int64)) * _TAG_WIDTH[entry.tag]


def _encode_header(entries: list[OutTensor]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "mlx"}}
    offset = 0
    for entry in entries:
        size = _nbytes(entry)
        header[entry.name] = {
            "dtype": entry.tag,
            "shape": list(entry.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as the format recommends
    return len(raw).to_bytes(8, "little") + raw
