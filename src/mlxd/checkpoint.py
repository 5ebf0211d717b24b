"""Rules for reading a checkpoint's JSON files that more than one layer applies: its context
window (the engine's limit, the store's listing), the sampling defaults its
generation_config.json supplies (the loader reads them, the option table merges them),
whether it is an embedding model and how it pools (the loader runs it, the store lists it), and
the vision family of its architecture (the loader refuses by it, `mlxd show`/`list` print it).

Pure functions over a checkpoint's JSON files: no mlx, nothing raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# config.json keys that give the context length, in the order they are trusted.
CONTEXT_KEYS = (
    "max_position_embeddings",
    "max_sequence_length",
    "max_seq_len",
    "seq_length",
    "n_positions",
    "n_ctx",
)
# A tokenizer's model_max_length at or above this is transformers' "no limit" placeholder.
_NO_TOKENIZER_LIMIT = 1 << 24

# generation_config.json keys that override config.SAMPLING_DEFAULTS (HF's names are ours);
# the sampling ones among them mean nothing when the file says do_sample is false.
# DRY and XTC are not HF's, but a generation_config that names them (as llama.cpp does) counts.
GENERATION_KEYS = (
    *("temperature", "top_p", "top_k", "min_p", "repetition_penalty"),
    *("dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n"),
    *("xtc_probability", "xtc_threshold"),
)
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "xtc_probability", "xtc_threshold")


def context_window(config: Mapping[str, object], model_max_length: object = None) -> int | None:
    """The model's context length: the first of CONTEXT_KEYS in config.json, else in its
    text_config (multimodal checkpoints), else the tokenizer's `model_max_length`; None when
    none of them says."""
    nested = config.get("text_config")
    for source in (config, nested if isinstance(nested, Mapping) else {}):
        for key in CONTEXT_KEYS:
            window = _positive_int(source.get(key))
            if window is not None:
                return min(window, _rescaled_from(config) or window) - _position_offset(config)
    limit = _positive_int(model_max_length)
    return limit if limit is not None and limit < _NO_TOKENIZER_LIMIT else None


def sampling_defaults(generation_config: Mapping[str, object]) -> dict[str, int | float]:
    """The per-model sampling defaults of a generation_config.json: the GENERATION_KEYS it sets
    to numbers. `do_sample: false` means greedy decoding (as in transformers): temperature 0,
    and the other sampling keys are ignored."""
    greedy = generation_config.get("do_sample") is False
    out: dict[str, int | float] = {"temperature": 0.0} if greedy else {}
    for key in GENERATION_KEYS:
        value = generation_config.get(key)
        if greedy and key in _SAMPLING_KEYS:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = value
    return out


def _position_offset(config: Mapping[str, object]) -> int:
    """Positions a RoBERTa-family encoder never gives a token: they count from pad_token_id +
    1, so of max_position_embeddings (XLM-R's 514) that many fewer tokens fit (512)."""
    if config.get("model_type") not in ("xlm-roberta", "roberta"):
        return 0
    pad = _positive_int(config.get("pad_token_id"))
    return (pad or 0) + 1


def _rescaled_from(config: Mapping[str, object]) -> int | None:
    """Where nomic-bert's dynamic rotary scaling starts (max_trained_positions, when it sets
    rotary_scaling_factor): past it the rotary base follows the padded batch's width, so a row
    would embed differently alone and in a batch; the window stops there."""
    if config.get("model_type") not in OWN_ENCODERS or not config.get("rotary_scaling_factor"):
        return None
    return _positive_int(config.get("max_trained_positions")) or 2048


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_json_object(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON object file, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# Encoder families (BERT, XLM-R, ModernBERT, nomic): embedding models whatever their files say.
ENCODER_TYPES = frozenset({"bert", "xlm-roberta", "roberta", "nomic_bert", "modernbert", "e5"})
# Encoder families mlx-embeddings runs through another family's class: RoBERTa is XLM-R's
# network (the same weight names, positions from pad_token_id + 1) with another vocabulary.
_ENCODER_CLASS_OF = {"roberta": "xlm_roberta"}
# Encoder families mlxd runs with a network of its own (backend/embedding/nomic_bert.py).
OWN_ENCODERS = frozenset({"nomic_bert"})
# The activation_function values of nomic's gated MLPs (fc11 * act(fc12)) mlxd computes.
NOMIC_GATES = ("swiglu", "geglu", "glu")


def runs_own_network(config: Mapping[str, object]) -> bool:
    """Whether mlxd computes this checkpoint with a network of its own: then config.json's
    auto_map names code mlxd replaces and never imports, and is not a reason to refuse it."""
    return str(config.get("model_type", "")) in OWN_ENCODERS


def encoder_module(model_type: str) -> str:
    """The mlx-embeddings `models` module that runs an encoder family."""
    name = model_type.replace("-", "_")
    return _ENCODER_CLASS_OF.get(name, name)


def encoder_refusal(config: Mapping[str, object]) -> str | None:
    """Why an encoder checkpoint's network is not the one its class computes, or None.
    mlx-embeddings' XLM-R class has absolute positions and exact GELU only."""
    model_type = str(config.get("model_type", ""))
    if runs_own_network(config):
        return _nomic_refusal(config)
    if encoder_module(model_type) != "xlm_roberta":
        return None
    act = config.get("hidden_act", "gelu")
    positions = config.get("position_embedding_type", "absolute")
    if act != "gelu":
        return f"its hidden_act {act!r} is not the exact GELU mlx-embeddings' XLM-R class runs"
    if positions != "absolute":
        return f"its position_embedding_type {positions!r} is not absolute"
    return None


def _nomic_refusal(config: Mapping[str, object]) -> str | None:
    """The nomic-bert variants mlxd's network does not compute (every nomic-embed-text
    checkpoint is post-norm, rotary, gated, without rotary scale_base)."""
    act = config.get("activation_function")
    if act not in NOMIC_GATES:
        return f"its activation_function {act!r} is not a gated MLP ({', '.join(NOMIC_GATES)})"
    fraction = config.get("rotary_emb_fraction")
    if not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        return f"its rotary_emb_fraction {fraction!r} is not in (0, 1]"
    for key in ("prenorm", "parallel_block", "use_rms_norm", "causal"):
        if config.get(key):
            return f"it sets {key}, which mlxd's nomic-bert network does not implement"
    if config.get("rotary_emb_scale_base") is not None:
        return "it sets rotary_emb_scale_base, which mlxd's nomic-bert network does not implement"
    return None


# sentence-transformers' pooling modes (1_Pooling/config.json keys), in the order trusted.
_POOLING_KEYS = (
    ("pooling_mode_lasttoken", "last"),
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_max_tokens", "max"),
)


@dataclass(frozen=True, slots=True)
class EmbeddingSpec:
    """How an embedding checkpoint turns hidden states into one vector: `pooling` (cls,
    mean, max or last token), then `normalize` (to unit length); `encoder`: a bidirectional
    encoder (BERT family) rather than a decoder body (Qwen3-Embedding); `layer_norm_cut`:
    a cut to fewer dimensions first layer-norms the full vector (nomic-bert's model card)."""

    pooling: str
    normalize: bool
    encoder: bool
    layer_norm_cut: bool = False


def embedding_spec(root: Path, config: Mapping[str, object]) -> EmbeddingSpec | None:
    """The checkpoint's embedding spec, or None for a generative model. An embedding model is
    an encoder family, a sentence-transformers layout (modules.json), or a bare body
    (`architectures` ending in Model). Pooling comes from modules.json's Pooling module
    (1_Pooling/config.json), else cls for encoders (bge, the BERT pooler's token) and last
    token for decoders; normalizing from its Normalize module, else on by default."""
    model_type = str(config.get("model_type", ""))
    archs = config.get("architectures")
    names = [str(a) for a in archs] if isinstance(archs, list) else []
    modules = _modules(root)
    encoder = model_type in ENCODER_TYPES
    bare = bool(names) and all(a.endswith("Model") for a in names)
    if not (encoder or modules is not None or bare):
        return None
    # nomic-embed-text v1.5's Matryoshka recipe layer-norms before cutting (v1 has none,
    # but shares the config; a cut of v1 is no trained use either way).
    nomic = model_type == "nomic_bert"
    if modules is None:
        return EmbeddingSpec("cls" if encoder else "last", True, encoder, nomic)
    kinds = {str(m.get("type", "")).rsplit(".", 1)[-1]: m for m in modules}
    pooling = "cls" if encoder else "last"
    if "Pooling" in kinds:
        folder = str(kinds["Pooling"].get("path", "1_Pooling"))
        pooled = read_json_object(root / folder / "config.json")
        pooling = next((mode for key, mode in _POOLING_KEYS if pooled.get(key) is True), pooling)
    return EmbeddingSpec(pooling, "Normalize" in kinds, encoder, nomic)


def embedding_dimensions(config: Mapping[str, object]) -> int:
    """An embedding model's vector length: its hidden size (`n_embd` in nomic's GPT-2-style
    config; a nested `text_config`'s when it has one), 0 when the config names none."""
    nested = config.get("text_config")
    sizes: Mapping[str, object] = nested if isinstance(nested, dict) else config
    size = sizes.get("hidden_size") or sizes.get("n_embd")
    return size if isinstance(size, int) else 0


def _modules(root: Path) -> list[dict[str, Any]] | None:
    """sentence-transformers' modules.json (its list of modules), or None."""
    try:
        data = json.loads((root / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else None


# ---- vision families ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VisionFamily:
    """How mlxd serves a vision checkpoint's architecture (config.json `model_type`):
    `name` for people, `batches` (image requests decode inside the shared batch, checked
    alone == batched on a tiny checkpoint of it), or `refused`: why a load refuses it."""

    name: str
    batches: bool = False
    refused: str | None = None

    @property
    def serving(self) -> str:
        """One phrase for `mlxd show` / `mlxd list`."""
        if self.refused:
            return f"refused: {self.refused}"
        return "batched with text" if self.batches else "not verified"


_UNFED = "beside the input embeddings, which mlxd's batch does not feed"
_CROSS_ATTENTION = f"its language model reads the image through cross-attention states {_UNFED}"
_PER_LAYER = f"its language model takes per-layer inputs {_UNFED}"
# model_type -> name of the families verified to batch (tests/vision_families.py and kin).
_BATCHED = {
    "llava": "LLaVA", "gemma3": "Gemma 3", "idefics3": "Idefics3 / SmolVLM",
    "smolvlm": "SmolVLM2", "mistral3": "Mistral 3 (Pixtral tower)", "pixtral": "Pixtral",
    "qwen2_vl": "Qwen2-VL", "qwen2_5_vl": "Qwen2.5-VL", "qwen3_vl": "Qwen3-VL",
    "qwen3_5": "Qwen3.5", "llava_next": "LLaVA-Next",
}  # fmt: skip
VISION_FAMILIES: dict[str, VisionFamily] = {
    **{kind: VisionFamily(name, batches=True) for kind, name in _BATCHED.items()},
    "mllama": VisionFamily("Llama 3.2 Vision", refused=_CROSS_ATTENTION),
    "gemma3n": VisionFamily("Gemma 3n", refused=_PER_LAYER),
}


def vision_family(config: Mapping[str, Any]) -> VisionFamily | None:
    """The family of a checkpoint whose config describes a vision tower; None for others.
    An architecture not in VISION_FAMILIES is named by its model_type and not verified."""
    if not isinstance(config.get("vision_config"), Mapping):
        return None
    model_type = str(config.get("model_type") or "")
    return VISION_FAMILIES.get(model_type) or VisionFamily(model_type or "unknown")
