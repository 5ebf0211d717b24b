"""GGUF llama metadata -> validated hyperparameters -> an HF/mlx-lm `config.json` dict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxd.errors import ModelBroken
from mlxd.store.gguf.reader import GgufFile
from mlxd.store.gguf.rope import rope_scaling_from_freqs

SUPPORTED_ARCHITECTURES = ("llama",)
ROPE_FREQS = "rope_freqs.weight"  # folded into config.json's rope_scaling, not a weight
_MAX_DIM = 1 << 20  # sanity bound on any single size field of an untrusted file


@dataclass(frozen=True, slots=True)
class LlamaHParams:
    """The sizes a llama checkpoint needs, read from `llama.*` GGUF keys and checked."""

    n_layers: int
    hidden: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rms_eps: float
    rope_theta: float
    tied_embeddings: bool
    rope_scaling: dict[str, Any] | None = None


def read_hparams(gguf: GgufFile) -> LlamaHParams:
    """Raise ModelBroken("unsupported architecture ...") unless `gguf` is a plain llama."""
    check_supported(gguf)
    n_heads = _dim(gguf, "llama.attention.head_count")
    hidden = _dim(gguf, "llama.embedding_length")
    head_dim = _dim(gguf, "llama.attention.key_length", hidden // n_heads)
    if _dim(gguf, "llama.attention.value_length", head_dim) != head_dim:
        raise ModelBroken("unsupported GGUF: key and value head sizes differ")
    if _dim(gguf, "llama.rope.dimension_count", head_dim) != head_dim:
        raise ModelBroken("unsupported GGUF: partial rotary embedding (rope dims != head size)")
    n_kv_heads = _dim(gguf, "llama.attention.head_count_kv", n_heads)
    if n_heads % n_kv_heads:
        raise ModelBroken(f"GGUF head counts are inconsistent: {n_heads} heads, {n_kv_heads} kv")
    if head_dim % 2:
        raise ModelBroken(f"GGUF head size {head_dim} is odd: rotary embedding needs it even")
    return LlamaHParams(
        n_layers=_dim(gguf, "llama.block_count"),
        hidden=hidden,
        ffn=_dim(gguf, "llama.feed_forward_length"),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=head_dim,
        vocab_size=_vocab_size(gguf),
        context_length=_dim(gguf, "llama.context_length", 2048),
        rms_eps=_positive(gguf, "llama.attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=_positive(gguf, "llama.rope.freq_base", 10000.0),
        tied_embeddings="output.weight" not in gguf.tensors,
        rope_scaling=_rope_scaling(gguf, head_dim),
    )


def check_supported(gguf: GgufFile) -> None:
    """Refuse, with the reason, what the importer cannot convert faithfully."""
    arch = gguf.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelBroken(
            f"unsupported architecture {arch or '(none)'!r} in {gguf.path.name}: "
            f"mlxd imports {', '.join(SUPPORTED_ARCHITECTURES)} GGUF files"
        )
    if gguf.value("split.count", int, 0) > 1:
        raise ModelBroken(
            f"{gguf.path.name} is one part of a split GGUF: merge the parts first "
            "(llama.cpp's `llama-gguf-split --merge`)"
        )
    if gguf.value("llama.expert_count", int, 0) > 0:
        raise ModelBroken("unsupported architecture: mixture-of-experts llama GGUF files")


def hf_config(hp: LlamaHParams, dtype: str, special: dict[str, Any]) -> dict[str, Any]:
    """The `config.json` mlx-lm's llama loads; `special` holds bos/eos token ids."""
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hp.hidden,
        "intermediate_size": hp.ffn,
        "num_hidden_layers": hp.n_layers,
        "num_attention_heads": hp.n_heads,
        "num_key_value_heads": hp.n_kv_heads,
        "head_dim": hp.head_dim,
        "vocab_size": hp.vocab_size,
        "max_position_embeddings": hp.context_length,
        "rms_norm_eps": hp.rms_eps,
        "rope_theta": hp.rope_theta,
        "tie_word_embeddings": hp.tied_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
        **special,
    }
    if hp.rope_scaling:
        config["rope_scaling"] = hp.rope_scaling
    return config


# GGUF general.sampling.* keys -> generation_config.json keys, with their valid ranges.
_SAMPLING = {
    "temp": ("temperature", 0.0, 100.0),
    "top_p": ("top_p", 0.0, 1.0),
    "min_p": ("min_p", 0.0, 1.0),
    "top_k": ("top_k", 0, 1 << 20),
    "penalty_repeat": ("repetition_penalty", 0.0, 100.0),
}


def sampling_defaults(gguf: GgufFile) -> dict[str, Any]:
    """The model author's recommended sampling (general.sampling.*) as HF generation keys."""
    out: dict[str, Any] = {}
    for key, (name, low, high) in _SAMPLING.items():
        value = gguf.metadata.get(f"general.sampling.{key}")
        if isinstance(value, int | float) and not isinstance(value, bool):
            if low <= value <= high:  # NaN fails too; out-of-range hints are dropped
                out[name] = value
    if out:
        out["do_sample"] = out.get("temperature", 1.0) > 0
    return out


def _dim(gguf: GgufFile, key: str, default: int | None = None) -> int:
    value = gguf.value(key, int, default)
    if not 0 < value <= _MAX_DIM:
        raise ModelBroken(f"GGUF metadata {key} = {value} is out of range")
    return int(value)


def _positive(gguf: GgufFile, key: str, default: float) -> float:
    value = float(gguf.value(key, float, default))
    if not value > 0 or value != value or value == float("inf"):
        raise ModelBroken(f"GGUF metadata {key} = {value} is out of range")
    return value


def _vocab_size(gguf: GgufFile) -> int:
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    n_tokens = len(tokens) if isinstance(tokens, list) else None
    if "llama.vocab_size" in gguf.metadata:
        return _dim(gguf, "llama.vocab_size")
    if n_tokens:
        return n_tokens
    raise ModelBroken(f"GGUF file {gguf.path.name} has no vocabulary")


def _rope_scaling(gguf: GgufFile, head_dim: int) -> dict[str, Any] | None:
    if ROPE_FREQS in gguf.tensors:  # Llama 3.1+: per-frequency divisors instead of keys
        theta = _positive(gguf, "llama.rope.freq_base", 10000.0)
        return rope_scaling_from_freqs(gguf.tensors[ROPE_FREQS], head_dim, theta)
    kind = gguf.value("llama.rope.scaling.type", str, "none")
    if kind == "none":
        return None
    if kind != "linear":
        raise ModelBroken(f"unsupported GGUF rope scaling {kind!r} (only linear is imported)")
    factor = _positive(gguf, "llama.rope.scaling.factor", 1.0)
    return None if factor == 1.0 else {"type": "linear", "factor": factor}
