"""Recovering llama3 rope_scaling from rope_freqs divisors, without a model."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType

from mlxd.errors import ModelBroken
from mlxd.store.gguf.reader import GgufTensor
from mlxd.store.gguf.rope import rope_scaling_from_freqs


def converter_factors(head_dim, theta, factor, low, high, context) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's rope_freqs, written out independently."""
    out = []
    for freq in 1.0 / (theta ** (np.arange(0, head_dim, 2) / head_dim)):
        wavelen = 2 * np.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def tensor(values: np.ndarray) -> GgufTensor:
    return GgufTensor("rope_freqs.weight", GGMLQuantizationType.F32, values.shape, values)


@pytest.mark.parametrize(
    ("head_dim", "theta", "params"),
    [
        (64, 500000.0, (32.0, 1.0, 4.0, 8192)),  # Llama 3.2 1B/3B
        (128, 500000.0, (8.0, 1.0, 4.0, 8192)),  # Llama 3.1 8B
        (16, 10000.0, (8.0, 1.0, 8.0, 256)),  # unusual: solved from the smooth band
    ],
)
def test_importer_rope_freqs_recovered(head_dim: int, theta: float, params: tuple) -> None:
    factors = converter_factors(head_dim, theta, *params)
    scaling = rope_scaling_from_freqs(tensor(factors), head_dim, theta)
    assert scaling is not None and scaling["rope_type"] == "llama3"
    rebuilt = converter_factors(
        head_dim,
        theta,
        scaling["factor"],
        scaling["low_freq_factor"],
        scaling["high_freq_factor"],
        scaling["original_max_position_embeddings"],
    )
    np.testing.assert_allclose(rebuilt, factors, rtol=1e-4)


def test_importer_rope_freqs_all_ones_mean_no_scaling() -> None:
    assert rope_scaling_from_freqs(tensor(np.ones(32, dtype=np.float32)), 64, 500000.0) is None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (np.random.default_rng(0).uniform(1, 9, 32).astype(np.float32), "match no llama3"),
        (np.full(32, -1.0, dtype=np.float32), "non-positive"),
        (np.ones(16, dtype=np.float32), "shape"),
    ],
)
def test_importer_rope_freqs_refused(values: np.ndarray, message: str) -> None:
    with pytest.raises(ModelBroken, match=message):
        rope_scaling_from_freqs(tensor(values), 64, 500000.0)
