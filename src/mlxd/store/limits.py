"""What loading a model would build and need, checked from config.json and the safetensors
headers before any load.

A config is data from a stranger: `num_hidden_layers: 1000000000` makes mlx-lm build a
billion layer objects (gigabytes of Python objects, long before any weight is read). So the
counts a model's code loops over must be whole numbers the weights can back, and the weights
must fit in the memory this process may use.
"""

from __future__ import annotations

import re
from typing import Any

from mlxd.backend.headroom import available_memory
from mlxd.config import setting_float, setting_int
from mlxd.store.problems import Problem, Severity, broken
from mlxd.store.safetensors_meta import SafetensorsHeader, TensorInfo

# Config keys whose value mlx-lm models loop over to build modules (per layer, per expert).
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# `model.layers.3.`, `transformer.h.3.`, `backbone.blocks.3.`: the index of a layer's tensors.
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


def architecture_problems(
    config: dict[str, Any], headers: list[SafetensorsHeader]
) -> list[Problem]:
    """Layer and expert counts of config.json (and its text_config) against the weights:
    each must be a whole number, and no larger than what the tensors hold."""
    tensors = [t for h in headers for t in h.tensors]
    if not tensors:
        return []
    layers = _layer_count(tensors)
    bounds = {key: layers or len(tensors) for key in LAYER_KEYS}
    bounds |= {key: _expert_bound(tensors) for key in EXPERT_KEYS}
    problems = []
    for prefix, section in _sections(config):
        for key, bound in bounds.items():
            value = section.get(key)
            name = prefix + key
            if value is None:
                continue
            if not _is_count(value):
                problems.append(
                    broken("config_mismatch", f"config.json {name} is {value!r}, not a count")
                )
            elif value > bound:
                noun = "layers" if key in LAYER_KEYS else "experts"
                problems.append(
                    broken(
                        "config_mismatch",
                        f"config.json declares {value} {noun} ({name}), the weights hold {bound}",
                    )
                )
    return problems


def memory_problems(headers: list[SafetensorsHeader]) -> list[Problem]:
    """The weights, plus the KV budget when one is set (MLXD_KV_BUDGET_BYTES), against
    `load_memory_fraction` of the memory this process may use."""
    fraction = setting_float("load_memory_fraction")
    available = available_memory()
    if fraction <= 0 or available is None:
        return []
    weights = sum(h.data_bytes for h in headers)
    kv = setting_int("kv_budget_bytes")
    limit, source = available
    if weights + kv <= fraction * limit:
        return []
    what = f"its weights need {_gb(weights)}"
    if kv:
        what += f" and the KV budget (MLXD_KV_BUDGET_BYTES) {_gb(kv)}"
    return [
        Problem(
            Severity.TOO_LARGE,
            "too_large",
            f"{what} of memory, {_gb(limit)} is available ({source}); "
            "MLXD_LOAD_MEMORY_FRACTION=0 turns this check off",
        )
    ]


def _layer_count(tensors: list[TensorInfo]) -> int:
    indices = [int(m.group(1)) for t in tensors for m in [_LAYER_INDEX.search(t.name)] if m]
    return max(indices) + 1 if indices else 0


def _expert_bound(tensors: list[TensorInfo]) -> int:
    """Experts are stacked (one tensor, experts first) or one module each (a tensor each)."""
    stacked = [t.shape[0] for t in tensors if len(t.shape) >= 3]
    return max([len(tensors), *stacked])


def _sections(config: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = [("", config)]
    for key in ("text_config", "language_config", "llm_config"):
        if isinstance(config.get(key), dict):
            out.append((f"{key}.", config[key]))
    return out


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"
