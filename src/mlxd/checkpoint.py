"""Rules for reading a checkpoint's JSON files that more than one layer applies: its context
window (the engine's limit, the store's listing) and the sampling defaults its
generation_config.json supplies (the loader reads them, the option table merges them).

Pure functions over parsed JSON: no I/O, no mlx, nothing raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def context_window(config: Mapping[str, object], model_max_length: object = None) -> int | None:
    """The model's context length: the first of CONTEXT_KEYS in config.json, else in its
    text_config (multimodal checkpoints), else the tokenizer's `model_max_length`; None when
    none of them says."""
    nested = config.get("text_config")
    for source in (config, nested if isinstance(nested, Mapping) else {}):
        for key in CONTEXT_KEYS:
            window = _positive_int(source.get(key))
            if window is not None:
                return window
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


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_json_object(path: Path) -> dict[str, Any]:
    """A checkpoint's JSON object file, or {} when it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
