"""Importer pieces without a model: names, shapes, rotary permutation, dtypes, metadata."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from hypothesis import given
from hypothesis import strategies as st
from safetensors.numpy import load_file

from mlxd.errors import InvalidRequest, ModelBroken
from mlxd.store.gguf.hparams import LlamaHParams, read_hparams
from mlxd.store.gguf.reader import GgufFile, GgufTensor
from mlxd.store.gguf.weights import (
    WeightPlan,
    expected_shapes,
    hf_name,
    permute,
    to_dtype,
    unpermute,
    write_safetensors,
)
from mlxd.store.staging import check_name, slugify

LLAMA = {
    "general.architecture": "llama",
    "llama.block_count": 2,
    "llama.embedding_length": 64,
    "llama.feed_forward_length": 128,
    "llama.attention.head_count": 4,
}


def gguf(metadata: dict, tensors: tuple[str, ...] = ("output.weight",)) -> GgufFile:
    fake = {n: GgufTensor(n, GGMLQuantizationType.F32, (1,), np.zeros(1)) for n in tensors}
    return GgufFile(Path("x.gguf"), metadata, fake)


@pytest.mark.parametrize(
    ("gguf_name", "hf"),
    [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
        ("blk.12.attn_k.weight", "model.layers.12.self_attn.k_proj.weight"),
        ("blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"),
        ("blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"),
        ("blk.1.attn_norm.weight", "model.layers.1.input_layernorm.weight"),
        ("blk.1.ffn_norm.weight", "model.layers.1.post_attention_layernorm.weight"),
        ("blk.29.ffn_gate.weight", "model.layers.29.mlp.gate_proj.weight"),
        ("blk.29.ffn_up.weight", "model.layers.29.mlp.up_proj.weight"),
        ("blk.29.ffn_down.weight", "model.layers.29.mlp.down_proj.weight"),
        ("blk.0.attn_q.bias", None),
        ("rope_freqs.weight", None),
        ("blk.x.attn_q.weight", None),
    ],
)
def test_importer_tensor_names(gguf_name: str, hf: str | None) -> None:
    assert hf_name(gguf_name) == hf


def test_importer_expected_shapes_gqa() -> None:
    hp = read_hparams(gguf(LLAMA | {"llama.attention.head_count_kv": 2, "llama.vocab_size": 50}))
    shapes = expected_shapes(hp)
    assert shapes["model.layers.1.self_attn.q_proj.weight"] == (64, 64)
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == (32, 64)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 128)
    assert shapes["lm_head.weight"] == (50, 64)  # untied: output.weight present
    assert len(shapes) == 3 + 2 * 9


def test_importer_unpermute_layout() -> None:
    """GGUF row 2i of a head holds HF row i (first rotary half), row 2i+1 holds HF row hd/2+i."""
    heads, head_dim = 2, 8
    hf = np.arange(heads * head_dim)[:, None].astype(np.float32)
    stored = permute(hf, heads)
    for h in range(heads):
        for i in range(head_dim // 2):
            assert stored[h * head_dim + 2 * i, 0] == hf[h * head_dim + i, 0]
            assert stored[h * head_dim + 2 * i + 1, 0] == hf[h * head_dim + head_dim // 2 + i, 0]
    assert np.array_equal(unpermute(stored, heads), hf)


@given(
    heads=st.integers(1, 6), half=st.integers(1, 8), cols=st.integers(1, 5), seed=st.integers(0, 9)
)
def test_importer_unpermute_inverts_permute(heads: int, half: int, cols: int, seed: int) -> None:
    w = np.random.default_rng(seed).normal(size=(heads * half * 2, cols)).astype(np.float32)
    assert np.array_equal(unpermute(permute(w, heads), heads), w)


@pytest.mark.parametrize(
    ("value", "bits"),
    [
        (1.0, 0x3F80),
        (-2.0, 0xC000),
        (0.0, 0x0000),
        (np.float32(1 + 2**-8), 0x3F80),  # tie: round to even (down)
        (np.float32(1 + 3 * 2**-8), 0x3F82),  # tie: round to even (up)
        (np.float32(1 + 2**-8 + 2**-20), 0x3F81),  # above the tie: up
        (3.4028235e38, 0x7F80),  # float32 max rounds to bfloat16 infinity
    ],
)
def test_importer_bfloat16_rounding(value: float, bits: int) -> None:
    out = to_dtype(np.array([value], dtype=np.float32), "bfloat16")
    assert out.dtype == np.uint16 and int(out[0]) == bits


def test_importer_float16_and_float32_passthrough() -> None:
    w = np.array([1.5, -0.25, 3e-3], dtype=np.float32)
    assert to_dtype(w, "float32") is w
    assert np.array_equal(to_dtype(w, "float16"), w.astype(np.float16))


def test_importer_safetensors_writer(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"b.weight": rng.normal(size=(3, 5)), "a.weight": rng.normal(size=(7,))}
    plans = [
        WeightPlan(
            GgufTensor(name, GGMLQuantizationType.F32, a.shape, a.astype(np.float32)),
            name,
            a.shape,
        )
        for name, a in arrays.items()
    ]
    seen: list[str] = []
    size = write_safetensors(
        tmp_path / "m.safetensors", plans, "float32", lambda d, t, n: seen.append(n)
    )
    loaded = load_file(tmp_path / "m.safetensors")
    assert seen == ["b.weight", "a.weight"]
    assert size == (tmp_path / "m.safetensors").stat().st_size
    for name, a in arrays.items():
        assert np.array_equal(loaded[name], a.astype(np.float32))
    raw = (tmp_path / "m.safetensors").read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    assert header_len % 8 == 0
    assert json.loads(raw[8 : 8 + header_len])["__metadata__"] == {"format": "mlx"}
    loaded16 = load_file(_written(tmp_path, plans, "float16"))
    assert loaded16["a.weight"].dtype == np.float16


def _written(tmp_path: Path, plans: list[WeightPlan], dtype: str) -> Path:
    path = tmp_path / f"{dtype}.safetensors"
    write_safetensors(path, plans, dtype)
    return path


def test_importer_nonfinite_weights_refused(tmp_path: Path) -> None:
    bad = np.array([1.0, np.nan], dtype=np.float32)
    plan = WeightPlan(GgufTensor("w", GGMLQuantizationType.F32, (2,), bad), "w", (2,))
    with pytest.raises(ModelBroken, match="NaN"):
        write_safetensors(tmp_path / "m.safetensors", [plan], "float32")


def test_importer_hparams_defaults_and_rope_scaling() -> None:
    hp = read_hparams(
        gguf(
            LLAMA
            | {
                "tokenizer.ggml.tokens": ["a"] * 10,
                "llama.rope.scaling.type": "linear",
                "llama.rope.scaling.factor": 4.0,
            },
            tensors=(),
        )
    )
    assert hp == LlamaHParams(
        n_layers=2,
        hidden=64,
        ffn=128,
        n_heads=4,
        n_kv_heads=4,
        head_dim=16,
        vocab_size=10,
        context_length=2048,
        rms_eps=1e-5,
        rope_theta=10000.0,
        tied_embeddings=True,
        rope_scaling={"type": "linear", "factor": 4.0},
    )


@pytest.mark.parametrize(
    ("extra", "tensors", "message"),
    [
        ({"general.architecture": "gemma"}, (), "unsupported architecture 'gemma'"),
        ({"llama.expert_count": 8}, (), "mixture-of-experts"),
        ({"split.count": 3}, (), "one part of a split GGUF"),
        ({}, ("rope_freqs.weight",), "rope_freqs"),
        ({"llama.rope.dimension_count": 8}, (), "partial rotary"),
        ({"llama.rope.scaling.type": "yarn"}, (), "rope scaling 'yarn'"),
        ({"llama.block_count": "2"}, (), "has type str, expected int"),
        ({"llama.block_count": 0}, (), "out of range"),
        ({"llama.attention.layer_norm_rms_epsilon": float("nan")}, (), "out of range"),
        ({"llama.embedding_length": None}, (), "has type NoneType"),
    ],
)
def test_importer_hparams_refusals(extra: dict, tensors: tuple, message: str) -> None:
    metadata = LLAMA | {"llama.vocab_size": 10} | extra
    with pytest.raises(ModelBroken, match=message):
        read_hparams(gguf(metadata, tensors))


def test_importer_missing_metadata() -> None:
    metadata = {k: v for k, v in LLAMA.items() if k != "llama.feed_forward_length"}
    with pytest.raises(ModelBroken, match="lacks required metadata 'llama.feed_forward_length'"):
        read_hparams(gguf(metadata | {"llama.vocab_size": 10}))


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("Smollm2 135M 8k Lc100K Mix1 Ep2", "smollm2-135m-8k-lc100k-mix1-ep2"),
        ("Llama-3.2 1B Instruct", "llama-3.2-1b-instruct"),
        ("../../etc/passwd", "etc-passwd"),
        ("日本語", "model"),
        ("..a..b..", "a.b"),
    ],
)
def test_importer_slugify(text: str, slug: str) -> None:
    assert slugify(text) == slug
    assert check_name(slug) == slug


@pytest.mark.parametrize("name", ["ok-name", "Mixed.Case_1", "a" * 100])
def test_importer_check_name_accepts(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", ".x", "-x", "a/b", "a\\b", "a..b", "a b", "a" * 101, "ü"])
def test_importer_check_name_refuses(name: str) -> None:
    with pytest.raises(InvalidRequest, match="invalid model name"):
        check_name(name)


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0"])
def test_importer_affine_parts_equal_gguf_dequantize(qtype: str) -> None:
    """scale * code + bias reproduces gguf's own dequantization exactly, and codes pack
    32/bits to a uint32 with the first code in the lowest bits."""
    from gguf.quants import dequantize, quantize

    from mlxd.store.gguf.quant import KEEPABLE_BITS, affine_parts, pack

    encoding = GGMLQuantizationType[qtype]
    w = np.random.default_rng(3).normal(size=(6, 96)).astype(np.float32)
    data = quantize(w, encoding)
    codes, scales, biases = affine_parts(data, encoding, w.shape)
    bits = KEEPABLE_BITS[encoding]
    assert codes.max() < (1 << bits)
    rebuilt = np.repeat(scales, 32, axis=1) * codes + np.repeat(biases, 32, axis=1)
    np.testing.assert_array_equal(rebuilt, dequantize(data, encoding))
    packed = pack(codes, bits)
    per = 32 // bits
    assert packed.dtype == np.uint32 and packed.shape == (6, 96 // per)
    unpacked = [(packed >> np.uint32(bits * i)) & np.uint32((1 << bits) - 1) for i in range(per)]
    np.testing.assert_array_equal(np.stack(unpacked, axis=-1).reshape(codes.shape), codes)


def test_importer_sampling_defaults() -> None:
    from mlxd.store.gguf.hparams import sampling_defaults

    meta = {
        "general.sampling.temp": 0.6,
        "general.sampling.top_p": 0.9,
        "general.sampling.top_k": 40,
        "general.sampling.min_p": float("nan"),  # dropped: not a valid probability
        "general.sampling.penalty_repeat": True,  # dropped: not a number
    }
    assert sampling_defaults(gguf(meta)) == {
        "temperature": 0.6,
        "top_p": 0.9,
        "top_k": 40,
        "do_sample": True,
    }
    assert sampling_defaults(gguf({})) == {}


def test_importer_cli_and_default_model_import_light() -> None:
    """`mlxd --help` and store scans must not pay for numpy/gguf/tokenizers/mlx imports."""
    import subprocess
    import sys

    code = (
        "import sys, mlxd.cli.import_cmd, mlxd.store.default_model, mlxd.store.gguf.format;"
        "print(sorted(m for m in ('numpy', 'gguf', 'tokenizers', 'mlx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
