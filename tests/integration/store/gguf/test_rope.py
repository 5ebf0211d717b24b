"""Llama 3.x GGUFs: rope_freqs (per-frequency divisors) becomes config rope_scaling that
makes mlx-lm compute what llama.cpp computes."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load_model

from mlxd.store.gguf.importer import import_gguf
from tests.integration.store.gguf.gguf_builder import GgufFactory, write_reference

TOKENS = [(i * 37 + 11) % 400 for i in range(96)]  # < vocab; long enough to rotate far


def logits(path: Path) -> np.ndarray:
    model, _ = load_model(path)
    return np.array(model(mx.array([TOKENS]))[0])


@pytest.mark.parametrize(
    "rope",
    [
        (8.0, 1.0, 8.0, 256),  # two smoothly scaled frequencies: parameters solved
        (4.0, 1.0, 4.0, 8192),  # Meta's low/high factors and context: a known combination
    ],
)
def test_importer_llama3_rope_freqs(
    rope: tuple, tiny_gguf: GgufFactory, tiny_chat_model: Path, store: Path, tmp_path: Path
) -> None:
    built = tiny_gguf("F32", llama3_rope=rope)
    result = import_gguf(built.path, "rope")
    scaling = json.loads((result.path / "config.json").read_text())["rope_scaling"]
    assert scaling["rope_type"] == "llama3" and scaling["factor"] == rope[0]
    assert "rope_freqs.weight" not in mx.load(str(result.path / "model.safetensors"))
    reference = write_reference(built, tiny_chat_model, tmp_path / "reference")
    imported = logits(result.path)
    np.testing.assert_allclose(imported, logits(reference), rtol=1e-4, atol=1e-4)
    if rope[3] == 256:  # here scaling changes most frequencies: the test is not vacuous
        assert not np.allclose(imported, logits(tiny_chat_model), rtol=1e-3, atol=1e-3)
