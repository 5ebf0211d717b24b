"""Write small llama GGUF files from a tiny HF-layout checkpoint, the way llama.cpp's converter
does: GGUF tensor names, q/k rows permuted for its rotary layout, block-quantized weights,
the BPE vocabulary and merges, and the chat template in the metadata.

`build_gguf` also returns the float32 weights (HF layout) the import must reproduce: the
original ones for F32, or what the chosen encoding rounds them to.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import dequantize, quantize
from safetensors.numpy import load_file, save_file

_BLOCK = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


@dataclass(slots=True)
class BuiltGguf:
    path: Path
    reference: dict[str, np.ndarray]  # HF name -> float32 weights the import must give
    config: dict[str, Any]  # HF config.json of the reference model
    raw_q: np.ndarray  # layer 0 q rows as stored in the GGUF (permuted), dequantized


GgufFactory = Callable[..., BuiltGguf]


def gguf_name(hf: str) -> str:
    """HF llama tensor name -> llama.cpp GGUF name (inverse of mlxd's mapping)."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf in fixed:
        return fixed[hf]
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{_BLOCK[rest.removesuffix('.weight')]}.weight"


def build_gguf(
    checkpoint: Path,
    out: Path,
    qtype: str = "F32",
    *,
    arch: str = "llama",
    untied: bool = False,
    pre: str = "gpt2",
    tokenizer_model: str = "gpt2",
    name: str = "Tiny Llama Test",
    add_bos: bool = False,
    overrides: tuple[tuple[str, int], ...] = (),
    embed_qtype: str | None = None,
    spm_model: bytes | None = None,
    llama3_rope: tuple[float, float, float, int] | None = None,
    seed: int = 1,
) -> BuiltGguf:
    """`overrides` replace config sizes in the GGUF metadata only (to make broken files);
    `embed_qtype` encodes the embedding differently (SmolLM2: Q8_0 embedding, Q4_1 rest);
    `spm_model` (a serialized SentencePiece model) replaces the BPE vocabulary;
    `llama3_rope` (factor, low, high, original context) adds llama.cpp's rope_freqs tensor."""
    config = json.loads((checkpoint / "config.json").read_text())
    saved = load_file(checkpoint / "model.safetensors")
    weights = {k: v.astype(np.float32) for k, v in saved.items()}
    if untied:
        rng = np.random.default_rng(seed)
        weights["lm_head.weight"] = rng.normal(size=weights["model.embed_tokens.weight"].shape)
        weights["lm_head.weight"] = weights["lm_head.weight"].astype(np.float32)
        config = config | {"tie_word_embeddings": False}
    writer = GGUFWriter(str(out), arch)
    _add_hparams(writer, config | dict(overrides), name)
    if spm_model is None:
        _add_tokenizer(writer, checkpoint, pre, tokenizer_model, add_bos)
    else:
        _add_spm_tokenizer(writer, spm_model)
    reference: dict[str, np.ndarray] = {}
    raw_q = np.zeros(0)
    heads = {"q_proj": config["num_attention_heads"], "k_proj": config["num_key_value_heads"]}
    for hf, w in sorted(weights.items()):
        n_heads = heads.get(hf.split(".")[-2], 0)
        stored = permute(w, n_heads) if n_heads else w
        kind = (embed_qtype or qtype) if hf == "model.embed_tokens.weight" else qtype
        data, encoding = _encode(stored, kind if w.ndim == 2 else "F32")
        writer.add_tensor(gguf_name(hf), data, raw_dtype=encoding)
        decoded = dequantize(data, encoding).astype(np.float32).reshape(w.shape)
        if hf == "model.layers.0.self_attn.q_proj.weight":
            raw_q = decoded
        reference[hf] = _unpermute(decoded, n_heads) if n_heads else decoded
    if llama3_rope:
        scaling = {"rope_type": "llama3", **dict(zip(_LLAMA3_KEYS, llama3_rope, strict=True))}
        config = config | {"rope_scaling": scaling}
        head_dim = config["hidden_size"] // config["num_attention_heads"]
        factors = rope_factors(head_dim, config["rope_theta"], *llama3_rope)
        writer.add_tensor("rope_freqs.weight", factors.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return BuiltGguf(out, reference, config, raw_q)


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def rope_factors(
    head_dim: int, theta: float, factor: float, low: float, high: float, context: int
) -> np.ndarray:
    """As llama.cpp's converter computes rope_freqs from HF's llama3 rope_scaling."""
    periods = 2 * np.pi * theta ** (np.arange(0, head_dim, 2) / head_dim)
    smooth = (context / periods - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    return np.where(periods < context / high, 1.0, np.where(periods > context / low, factor, mid))


def write_reference(built: BuiltGguf, checkpoint: Path, out: Path) -> Path:
    """An HF checkpoint dir holding `built.reference`, with the original tokenizer files."""
    out.mkdir(parents=True, exist_ok=True)
    save_file(built.reference, out / "model.safetensors", metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(built.config))
    for file in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(checkpoint / file, out / file)
    return out


def permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute, verbatim in substance."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    # Written out here (not imported from mlxd) so the test does not trust the code under test.
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _encode(w: np.ndarray, qtype: str) -> tuple[np.ndarray, GGMLQuantizationType]:
    encoding = GGMLQuantizationType[qtype]
    if qtype == "F32":
        return np.ascontiguousarray(w, dtype=np.float32), encoding
    if qtype == "F16":
        return np.ascontiguousarray(w, dtype=np.float16), encoding
    return quantize(np.ascontiguousarray(w, dtype=np.float32), encoding), encoding


def _add_hparams(writer: GGUFWriter, config: dict[str, Any], name: str) -> None:
    writer.add_name(name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    writer.add_rope_dimension_count(head_dim)


def _add_tokenizer(
    writer: GGUFWriter, checkpoint: Path, pre: str, model: str, add_bos: bool
) -> None:
    tok = json.loads((checkpoint / "tokenizer.json").read_text())
    tok_config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    for added in tok["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))  # ids are contiguous
    special = {a["content"] for a in tok["added_tokens"] if a["special"]}
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    kinds = [TokenType.CONTROL if t in special else TokenType.NORMAL for t in tokens]
    writer.add_token_types(kinds)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab[tok_config["eos_token"]])
    writer.add_pad_token_id(vocab[tok_config["pad_token"]])
    writer.add_add_bos_token(add_bos)
    if add_bos:
        writer.add_bos_token_id(vocab["<|endoftext|>"])
    if "chat_template" in tok_config:
        writer.add_chat_template(tok_config["chat_template"])


def _add_spm_tokenizer(writer: GGUFWriter, model: bytes) -> None:
    """As llama.cpp's converter writes a SentencePiece vocabulary (its _set_vocab_sentencepiece)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    kinds = []
    for i in range(sp.get_piece_size()):
        if sp.is_unknown(i):
            kinds.append(TokenType.UNKNOWN)
        elif sp.is_control(i):
            kinds.append(TokenType.CONTROL)
        elif sp.is_byte(i):
            kinds.append(TokenType.BYTE)
        elif sp.is_unused(i):
            kinds.append(TokenType.UNUSED)
        elif sp.id_to_piece(i).startswith("<|"):  # the trainer's user_defined_symbols
            kinds.append(TokenType.USER_DEFINED)
        else:
            kinds.append(TokenType.NORMAL)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    writer.add_token_scores([sp.get_score(i) for i in range(sp.get_piece_size())])
    writer.add_token_types(kinds)
    writer.add_bos_token_id(sp.bos_id())
    writer.add_eos_token_id(sp.eos_id())
    writer.add_unk_token_id(sp.unk_id())
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(True)
