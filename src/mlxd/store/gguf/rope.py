"""Recover Llama 3.x `rope_scaling` from a GGUF `rope_freqs.weight` tensor.

llama.cpp's converter turns HF's llama3 rope scaling (factor, low/high frequency factors,
original context) into one divisor per rotary frequency and drops the parameters. mlx-lm
needs the parameters, so they are solved back from the divisors and accepted only if the
converter's own formula reproduces every divisor from them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType

from mlxd.errors import ModelBroken
from mlxd.store.gguf.reader import GgufTensor

_TOLERANCE = 1e-4
_COMMON = [(lo, hi, ctx) for ctx in (8192, 4096, 2048, 16384, 32768) for lo, hi in ((1.0, 4.0),)]


def llama3_factors(
    head_dim: int, theta: float, factor: float, low: float, high: float, context: int
) -> np.ndarray:
    """The divisors llama.cpp's converter writes (its LlamaModel.generate_extra_tensors)."""
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out)


def rope_scaling_from_freqs(
    tensor: GgufTensor, head_dim: int, theta: float
) -> dict[str, Any] | None:
    """HF llama3 `rope_scaling` matching `tensor`, None if it scales nothing; else ModelBroken."""
    if tensor.qtype != GGMLQuantizationType.F32 or tensor.shape != (head_dim // 2,):
        raise ModelBroken(f"GGUF rope_freqs has shape {list(tensor.shape)}, not [{head_dim // 2}]")
    factors = np.asarray(tensor.data, dtype=np.float64)
    if not (np.isfinite(factors).all() and (factors > 0).all()):
        raise ModelBroken("GGUF rope_freqs holds non-positive or non-finite values")
    factor = float(factors.max())
    if np.allclose(factors, 1.0, rtol=0, atol=_TOLERANCE):
        return None
    for low, high, context in _candidates(factors, factor, head_dim, theta):
        cfg = _config(factor, low, high, context)
        expected = llama3_factors(
            head_dim, theta, cfg["factor"], cfg["low_freq_factor"], cfg["high_freq_factor"], context
        )
        if np.allclose(expected, factors, rtol=_TOLERANCE, atol=_TOLERANCE):
            return cfg
    raise ModelBroken(
        "unsupported GGUF: its rope frequency factors (rope_freqs) match no llama3 rope scaling"
    )


def _candidates(
    factors: np.ndarray, factor: float, head_dim: int, theta: float
) -> list[tuple[float, float, int]]:
    """Solved parameters first (needs 2+ smoothly scaled frequencies), then common ones."""
    wavelens = np.array([2 * math.pi * theta ** (i / head_dim) for i in range(0, head_dim, 2)])
    smooth = (factors > 1 + _TOLERANCE) & (factors < factor - _TOLERANCE)
    found: list[tuple[float, float, int]] = []
    if smooth.sum() >= 2 and factor > 1:
        # 1/f = (1 - s)/F + s  =>  s = (1/f - 1/F) / (1 - 1/F), and s is linear in 1/wavelen:
        # s = context/((high-low) wavelen) - low/(high-low). Only context/low and
        # context/high matter, so context is fixed at a conventional value.
        s = (1 / factors[smooth] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(1 / wavelens[smooth], s, 1)
        if slope > 0 and intercept < 0:
            context = 8192
            low = -intercept * context / slope
            high = low + context / slope
            found.append((float(low), float(high), context))
    return found + _COMMON


def _config(factor: float, low: float, high: float, context: int) -> dict[str, Any]:
    return {
        "rope_type": "llama3",
        "factor": round(factor, 6),
        "low_freq_factor": round(low, 6),
        "high_freq_factor": round(high, 6),
        "original_max_position_embeddings": context,
    }
