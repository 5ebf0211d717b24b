"""--keep-quantized: Q4_0/Q4_1/Q8_0 blocks become MLX affine weights that compute the same."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load_model

from mlxd.store.gguf.importer import import_gguf
from tests.integration.store.gguf.gguf_builder import GgufFactory, write_reference

TOKENS = [1, 17, 42, 300, 5, 99, 250, 7, 64, 128, 3, 200]


def logits(path: Path) -> np.ndarray:
    model, _ = load_model(path)
    return np.array(model(mx.array([TOKENS]))[0])


@pytest.mark.parametrize(
    ("qtype", "options", "embed_bits", "layer_bits"),
    [
        ("Q4_0", {}, 4, 4),
        ("Q8_0", {}, 8, 8),
        ("Q4_1", {"embed_qtype": "Q8_0"}, 8, 4),  # the SmolLM2 mix
        ("Q4_1", {"untied": True}, 4, 4),
    ],
)
def test_importer_keep_quantized_matches_reference(
    qtype: str,
    options: dict,
    embed_bits: int,
    layer_bits: int,
    tiny_gguf: GgufFactory,
    tiny_chat_model: Path,
    store: Path,
    tmp_path: Path,
) -> None:
    built = tiny_gguf(qtype, **options)
    result = import_gguf(built.path, "q", keep_quantized=True)
    assert result.quantized
    config = json.loads((result.path / "config.json").read_text())
    quant = config["quantization"]
    assert quant["group_size"] == 32 and quant["bits"] == layer_bits
    assert quant["model.embed_tokens"]["bits"] == embed_bits
    assert quant["model.layers.1.self_attn.k_proj"]["bits"] == layer_bits
    weights = mx.load(str(result.path / "model.safetensors"))
    assert weights["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert "model.layers.0.self_attn.q_proj.biases" in weights
    assert weights["model.norm.weight"].dtype == mx.float32
    reference = write_reference(built, tiny_chat_model, tmp_path / "reference")
    np.testing.assert_allclose(logits(result.path), logits(reference), rtol=1e-4, atol=1e-4)


def test_importer_keep_quantized_ignores_float_files(tiny_gguf: GgufFactory, store: Path) -> None:
    result = import_gguf(tiny_gguf("F16").path, "f16", keep_quantized=True)
    assert not result.quantized
    assert "quantization" not in json.loads((result.path / "config.json").read_text())
