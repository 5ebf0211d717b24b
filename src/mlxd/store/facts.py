"""Facts read from a model's config and tokenizer files: kind, quantization, chat-template
capabilities (the context window is mlxd.checkpoint's, the rule the engine applies too).
Pure functions over parsed JSON/text; never raise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlxd.checkpoint import VisionFamily, embedding_spec

_VISION_TYPES = {"llava", "qwen2_vl", "qwen2_5_vl", "mllama", "idefics3", "paligemma", "pixtral"}

# Reasoning start/end markers, looked up in the vocabulary and the template.
REASONING_MARKERS = [
    ("<think>", "</think>"),
    ("[THINK]", "[/THINK]"),
    ("<seed:think>", "</seed:think>"),
    ("<|channel|>analysis", "<|end|>"),
]
# Tool-call formats, most specific first: (name, any-of markers).
TOOL_FORMATS = [
    ("harmony", ("<|call|>", "to=functions.")),
    ("mistral", ("[TOOL_CALLS]",)),
    ("hermes", ("<tool_call>",)),
    ("llama3_json", ("<|python_tag|>", "ipython")),
]


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, or {} when missing or malformed (health reports those)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model's settings under text_config."""
    nested = config.get("text_config")
    return {**nested, **config} if isinstance(nested, dict) else config


def chat_template(root: Path, tok_config: dict[str, Any]) -> str | None:
    """The template text from tokenizer_config.json, chat_template.jinja or .json."""
    tpl = tok_config.get("chat_template")
    if isinstance(tpl, list):  # named templates: [{"name": "default", "template": ...}]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default") or next(iter(named.values()), None)
    if isinstance(tpl, str) and tpl:
        return tpl
    try:
        return (root / "chat_template.jinja").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    tpl = read_json(root / "chat_template.json").get("chat_template")
    return tpl if isinstance(tpl, str) and tpl else None


def kind(root: Path, config: dict[str, Any], has_template: bool) -> str:
    """chat / base / embedding / vision, as far as config and template tell."""
    model_type = str(config.get("model_type", ""))
    archs = " ".join(str(a) for a in config.get("architectures") or [])
    if "vision_config" in config or model_type in _VISION_TYPES or "VL" in archs:
        return "vision"
    if embedding_spec(root, config) is not None:
        return "embedding"
    return "chat" if has_template else "base"


def quantization(config: dict[str, Any]) -> dict[str, Any] | None:
    """{"bits", "group_size", "mode"} of MLX quantization, or None."""
    q = config.get("quantization") or config.get("quantization_config")
    if not isinstance(q, dict):
        return None
    out = {k: q[k] for k in ("bits", "group_size", "mode", "quant_method") if k in q}
    return out or None


def dtype(config: dict[str, Any], tensor_dtypes: list[str]) -> str | None:
    """The config's declared dtype, else the most common floating tensor dtype."""
    declared = text_config(config).get("torch_dtype") or config.get("dtype")
    if isinstance(declared, str):
        return declared
    floats = [d for d in tensor_dtypes if d in ("F32", "F16", "BF16")]
    if not floats:
        return None
    common = max(set(floats), key=floats.count)
    return {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[common]


def quant_label(config: dict[str, Any], dtype_name: str | None) -> str:
    """'4-bit g64'; 'mixed 3/6-bit g64' when layers differ (mlx-lm's recipes record each
    layer's own); a microscaling mode by its name ('mxfp4'); else the dtype."""
    q = quantization(config)
    if q and q.get("mode") not in (None, "affine"):
        return str(q["mode"])
    if q and "bits" in q:
        widths = sorted(_layer_bits(config)) or [q["bits"]]
        bits = "/".join(str(b) for b in widths)
        mixed = "mixed " if len(widths) > 1 else ""
        return f"{mixed}{bits}-bit" + (f" g{q['group_size']}" if "group_size" in q else "")
    if q:
        return str(q.get("quant_method", "quantized"))
    return dtype_name or "-"


def _layer_bits(config: dict[str, Any]) -> set[int]:
    """The bit widths of the per-layer entries of config's quantization block."""
    q = config.get("quantization") or config.get("quantization_config")
    layers = q.values() if isinstance(q, dict) else ()
    return {v["bits"] for v in layers if isinstance(v, dict) and isinstance(v.get("bits"), int)}


def special_vocab(tokenizer: dict[str, Any]) -> set[str]:
    """Added/special token strings from a parsed tokenizer.json."""
    added = tokenizer.get("added_tokens") or []
    return {str(t.get("content")) for t in added if isinstance(t, dict)}


def reasoning_markers(template: str | None, vocab: set[str]) -> list[str]:
    found: list[str] = []
    for start, end in REASONING_MARKERS:
        if start in vocab or (template and start in template):
            found += [start, end]
    return found


def tool_format(template: str | None, vocab: set[str]) -> str | None:
    for name, markers in TOOL_FORMATS:
        if any(m in vocab or (template and m in template) for m in markers):
            return name
    return None


def eos_tokens(
    config: dict[str, Any],
    tok_config: dict[str, Any],
    gen_config: dict[str, Any],
    id_to_token: dict[int, str],
) -> list[str]:
    """EOS token strings from tokenizer_config, generation_config and config (ids mapped)."""
    out: list[str] = []
    eos = tok_config.get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    if isinstance(eos, str):
        out.append(eos)
    for source in (gen_config, text_config(config)):
        ids = source.get("eos_token_id")
        for i in ids if isinstance(ids, list) else [ids]:
            if isinstance(i, int):
                out.append(id_to_token.get(i, f"<id {i}>"))
    return list(dict.fromkeys(out))


# `mlxd show`'s columns: label, --kv-bits, --kv-key-bits (16: 16-bit keys; 0: as --kv-bits)
_KV_SETTINGS = (("full", 0, 0), ("8-bit", 8, 0), ("4-bit", 4, 0), ("8-bit, 16-bit keys", 8, 16))


def kv_bytes_per_token(config: dict[str, Any], dtype_name: str | None) -> dict[str, int] | None:
    """KV bytes each context token adds at each --kv-bits setting (group 64), from config.json:
    full-attention layers x (keys + values) x KV heads x head dim; sliding-window and
    recurrent layers stop growing, so they are left out. A quantized setting the head dim does
    not allow is left out; None when the config does not say."""
    text = text_config(config)
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    if not isinstance(layers, int) or not isinstance(heads, int) or heads <= 0:
        return None
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or text.get("hidden_size", 0) // heads
    if not isinstance(kv_heads, int) or not isinstance(head_dim, int) or head_dim <= 0:
        return None
    width = 4 if dtype_name == "float32" else 2
    rows = _attention_layers(text, layers) * kv_heads  # each of keys and values
    out = {}
    for label, bits, key_bits in _KV_SETTINGS:
        if bits and head_dim % 64:
            continue  # groups of 64 do not split its heads: --kv-bits refuses it
        keys, values = (_head_bytes(head_dim, width, b) for b in (key_bits or bits, bits))
        out[label] = rows * (keys + values)
    return out


def _head_bytes(head_dim: int, width: int, bits: int) -> int:
    """One head's keys or values of one token: full precision (0), or packed levels plus a
    scale and a bias per group of 64, in the model's dtype (at 16 bits, keys only, float32:
    kv.quantized_batch.quantized16)."""
    if not bits:
        return head_dim * width
    return head_dim * bits // 8 + head_dim // 64 * 2 * (4 if bits == 16 else width)


def _attention_layers(text: dict[str, Any], layers: int) -> int:
    """How many layers keep every token's KV (hybrid and sliding-window configs say)."""
    types = text.get("layer_types")
    if isinstance(types, list) and types:
        return sum(1 for t in types if t in ("full_attention", "attention", "global"))
    for key in ("full_attn_idxs", "full_attention_layers"):
        if isinstance(text.get(key), list):
            return len(text[key])
    for key in ("full_attention_interval", "sliding_window_pattern"):
        every = text.get(key)
        if isinstance(every, int) and every > 0:
            return layers // every
    return layers


def vision_dict(family: VisionFamily | None) -> dict[str, object] | None:
    """A vision model's family as `mlxd list --json` / `mlxd show --json` print it."""
    if family is None:
        return None
    return {"family": family.name, "batches": family.batches, "refused": family.refused}


def vision_label(kind: str, family: VisionFamily | None) -> str:
    """The KIND column / `kind` line: a vision model's family and how it is served."""
    if family is None:
        return kind
    how = "refused" if family.refused else "batches" if family.batches else "not verified"
    return f"{kind} ({family.name}, {how})"
