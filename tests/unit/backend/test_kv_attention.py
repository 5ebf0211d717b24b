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


def test_16_bit_keys_are_levels_within_half_a_step_and_read_back_so() -> None:
    """quantized16: a triple shaped as mx.quantize's whose bits read as 16 from its shapes;
    each value read back (`history`) is within half a level of itself (a level is its
    group's range / 65535); a flat group reads back exactly; both attention ways over such
    keys give the float attention over them to float32 rounding."""
    from mlxd.backend.kv.quantized_batch import quantized, quantized16

    mx.random.seed(3)
    keys = mx.random.normal((ROWS, KV_HEADS, POSITIONS, DIM)) * 4.0
    keys[0, 0, 0] = 1.5  # a flat group
    triple = quantized16(keys, 64)
    assert attention.stored_bits(triple, 64) == 16
    assert triple[0].dtype == mx.uint32 and triple[0].shape[-1] == DIM // 2
    back = attention.history(triple, 64)
    grouped = keys.reshape(ROWS, KV_HEADS, POSITIONS, 1, 64)
    step = (grouped.max(axis=-1) - grouped.min(axis=-1)) / 65535.0
    error = mx.abs(back - keys).reshape(ROWS, KV_HEADS, POSITIONS, 1, 64).max(axis=-1)
    assert bool(mx.all(error <= step * 0.5 + 4e-6).item())  # and float32 rounding at ~16
    assert bool(mx.all(back[0, 0, 0] == 1.5).item())
    q = mx.random.normal((ROWS, HEADS, 1, DIM))
    values = quantized(mx.random.normal((ROWS, KV_HEADS, POSITIONS, DIM)), 64, 8)
    want = mx.fast.scaled_dot_product_attention(
        q, back, attention.history(values, 64), scale=0.125, mask=None
    )
    for way in (kernel_attention, dequantized_attention):
        got = way(q, triple, values, 0.125, None, 64, 8)
        assert mx.allclose(got, want, atol=1e-5).item()
