"""backend/kv/attention.py: both ways over quantized KV give mlx-lm's quantized attention."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models import base
from mlx_lm.models.base import create_causal_mask

from mlxd.backend.kv import attention
from mlxd.backend.kv.attention import dequantized_attention, kernel_attention

ROWS, HEADS, KV_HEADS, POSITIONS, DIM = 3, 6, 2, 96, 64


def _inputs(queries: int, bits: int) -> tuple[mx.array, tuple, tuple]:
    mx.random.seed(queries * 10 + bits)
    q = mx.random.normal((ROWS, HEADS, queries, DIM))
    k, v = (mx.random.normal((ROWS, KV_HEADS, POSITIONS, DIM)) for _ in range(2))
    return q, tuple(mx.quantize(k, 64, bits)), tuple(mx.quantize(v, 64, bits))


def _masks(queries: int) -> list[object]:
    padded = create_causal_mask(
        queries, offset=POSITIONS - queries, left_padding=mx.array([0, 5, 40])
    )
    additive = mx.where(padded, 0.0, -1e9)
    return [None, "causal", padded, additive]


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("queries", [1, 3, 12])
def test_both_ways_equal_mlx_lm(queries: int, bits: int) -> None:
    q, keys, values = _inputs(queries, bits)
    for mask in _masks(queries):
        # mlx-lm's own function (it scales its queries in place: given a copy)
        want = _mlx_lm_attention(mx.array(q), keys, values, 0.125, mask, 64, bits)
        for way in (kernel_attention, dequantized_attention):
            got = way(q, keys, values, 0.125, mask, 64, bits)
            assert got.shape == want.shape
            assert mx.allclose(got, want, atol=2e-4, rtol=1e-4).item(), (way.__name__, mask)


def test_the_query_count_and_history_pick_the_way(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[str] = []
    monkeypatch.setattr(attention, "kernel_attention", lambda *a: called.append("kernel"))
    monkeypatch.setattr(attention, "dequantized_attention", lambda *a: called.append("float"))
    q, keys, values = _inputs(1, 8)
    attention.quantized_attention(q, keys, values, 0.125, None, 64, 8)  # a short history
    assert called == ["float"]
    monkeypatch.setattr(attention, "SHORT_HISTORY", ROWS * POSITIONS - 1)
    for queries in (1, attention.DEQUANTIZED_FROM - 1, attention.DEQUANTIZED_FROM, 40):
        q, keys, values = _inputs(queries, 8)
        attention.quantized_attention(q, keys, values, 0.125, None, 64, 8)
    assert called == ["float", "kernel", "kernel", "float", "float"]


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_dequantized_is_mx_dequantize_bit_for_bit(
    dtype: mx.Dtype, bits: int, group_size: int
) -> None:
    mx.random.seed(bits + group_size)
    x = (mx.random.normal((2, 3, 40, 128)) * 4).astype(dtype)
    triple = tuple(mx.quantize(x, group_size, bits))
    want = mx.dequantize(*triple, group_size=group_size, bits=bits)
    got = attention.dequantized(triple, group_size, bits)
    assert got.dtype == want.dtype
    assert mx.array_equal(got, want).item()


def test_install_routes_mlx_lm_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "quantized_scaled_dot_product_attention", _mlx_lm_attention)
    attention.install()
    assert base.quantized_scaled_dot_product_attention is attention.quantized_attention


_mlx_lm_attention = base.quantized_scaled_dot_product_attention
