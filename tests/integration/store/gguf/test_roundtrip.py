"""An imported GGUF computes what the checkpoint it was made from computes.

The GGUF files are written like llama.cpp's converter writes them (q/k permuted, blocks
quantized), so equal logits show the renaming, dequantization, un-permutation and config
are all right together.
"""

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
    out = model(mx.array([TOKENS]))
    return np.array(out[0].astype(mx.float32))


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q8_0", "Q5_0", "Q5_1", "Q4_0", "Q4_1"])
def test_importer_logits_match_reference(
    qtype: str, tiny_gguf: GgufFactory, tiny_chat_model: Path, store: Path, tmp_path: Path
) -> None:
    built = tiny_gguf(qtype)
    result = import_gguf(built.path, "tiny")
    assert result.path == store / "tiny"
    reference = write_reference(built, tiny_chat_model, tmp_path / "reference")
    np.testing.assert_allclose(logits(result.path), logits(reference), rtol=1e-4, atol=1e-4)


def test_importer_f32_reproduces_original_checkpoint(
    tiny_gguf: GgufFactory, tiny_chat_model: Path, store: Path
) -> None:
    built = tiny_gguf("F32")
    result = import_gguf(built.path, "tiny")
    original = logits(tiny_chat_model)
    np.testing.assert_allclose(logits(result.path), original, rtol=1e-5, atol=1e-5)
    # The GGUF really stores q permuted: an import that skipped un-permuting would differ.
    q = np.array(mx.load(str(tiny_chat_model / "model.safetensors"))[
        "model.layers.0.self_attn.q_proj.weight"])  # fmt: skip
    assert not np.array_equal(built.raw_q, q)
    imported = mx.load(str(result.path / "model.safetensors"))
    assert np.array_equal(np.array(imported["model.layers.0.self_attn.q_proj.weight"]), q)


def test_importer_untied_lm_head(
    tiny_gguf: GgufFactory, tiny_chat_model: Path, store: Path, tmp_path: Path
) -> None:
    built = tiny_gguf("Q8_0", untied=True)
    result = import_gguf(built.path, "untied")
    config = json.loads((result.path / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    assert "lm_head.weight" in mx.load(str(result.path / "model.safetensors"))
    reference = write_reference(built, tiny_chat_model, tmp_path / "reference")
    np.testing.assert_allclose(logits(result.path), logits(reference), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_importer_dtype_rounds_like_mlx(dtype: str, tiny_gguf: GgufFactory, store: Path) -> None:
    built = tiny_gguf("F32")
    result = import_gguf(built.path, f"tiny-{dtype}", dtype=dtype)
    imported = mx.load(str(result.path / "model.safetensors"))
    target = getattr(mx, dtype)
    assert json.loads((result.path / "config.json").read_text())["torch_dtype"] == dtype
    for name, ref in built.reference.items():
        assert imported[name].dtype == target
        expected = mx.array(ref).astype(target)
        assert mx.array_equal(imported[name], expected).item(), name
    model, _ = load_model(result.path)
    assert np.isfinite(np.array(model(mx.array([TOKENS])).astype(mx.float32))).all()


def test_importer_config_facts(tiny_gguf: GgufFactory, tiny_chat_model: Path, store: Path) -> None:
    built = tiny_gguf("Q4_1")
    result = import_gguf(built.path)
    assert result.name == "tiny-llama-test"  # general.name, slugified
    config = json.loads((result.path / "config.json").read_text())
    original = json.loads((tiny_chat_model / "config.json").read_text())
    for key in (
        "hidden_size",
        "num_hidden_layers",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "max_position_embeddings",
        "rope_theta",
        "tie_word_embeddings",
        "eos_token_id",
    ):
        assert config[key] == original[key], key
    assert config["model_type"] == "llama"
    assert config["rms_norm_eps"] == pytest.approx(original["rms_norm_eps"])
    assert result.parameters == sum(v.size for v in built.reference.values())
    assert result.context_window == original["max_position_embeddings"]
    generation = json.loads((result.path / "generation_config.json").read_text())
    vocab = json.loads((tiny_chat_model / "tokenizer.json").read_text())["model"]["vocab"]
    pad = vocab[json.loads((tiny_chat_model / "tokenizer_config.json").read_text())["pad_token"]]
    assert generation == {"eos_token_id": original["eos_token_id"], "pad_token_id": pad}
