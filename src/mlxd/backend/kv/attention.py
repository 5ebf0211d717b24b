"""Attention over mlxd's quantized KV caches: what mlx-lm's attention calls for a cache with bits.

mlx-lm's `models.base.scaled_dot_product_attention` sends a cache with `bits` to the module
global `quantized_scaled_dot_product_attention`, looked up at each call; `install` puts
`quantized_attention` there (`quantize_kv` runs it when it gives a model quantized caches).
It picks one of two ways by the number of queries and the history's size:

- few queries over a long history (decode, short verifies): the scores over the keys read
  into float (`history`: a matmul then beats `mx.quantized_matmul`'s transposed kernel by
  3x on a CPU), the values through `mx.quantized_matmul` on the packed words; the query
  heads sharing a KV head are one matrix of queries (mlx-lm broadcasts the keys once per
  query head instead);
- otherwise (prefill chunks, short histories): the layer's history dequantized into a float
  copy (`dequantized`: bytes of the packed words, bit for bit `mx.dequantize`'s values at a
  quarter of its time on a CPU), then mlx's fused `mx.fast.scaled_dot_product_attention`; the
  copy is one layer's and is freed after.

The crossover, measured on a 2-core x86 CPU with MKL (8 rows, 9 query heads on 3 KV heads,
head dim 64, 8 and 4 bits, load ~5): over 1,024 positions the dequantized way took 5 ms for
1 query against 13 ms, over 4,096 it lost at 1-2 queries (78 against 36 ms) and won from 4
(115 against 144 ms; 161 against 293 at 8). Float32 KV took 18 ms for 1 query over 4,096:
on a CPU neither way reaches full precision's decode speed (no fused dequantizing kernel).
Those figures predate the decode way's float-read scores (15 -> 8.6 ms for 1 query over
4,096 positions); the crossover was not measured again.

Keys may be stored at bits of their own (`--kv-key-bits`): a triple's bits are read from its
shapes (16: mlxd's own 16-bit levels, quantized_batch.quantized16, read like the others).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

DEQUANTIZED_FROM = 4  # queries per row from which the history is dequantized (see above)
SHORT_HISTORY = 8 * 1024  # rows x positions up to which it is dequantized for any query count

Quantized = tuple[mx.array, ...]  # (packed words, scales, biases)


def install() -> None:
    """Make mlx-lm's attention over a quantized cache call `quantized_attention`."""
    from mlx_lm.models import base

    base.quantized_scaled_dot_product_attention = quantized_attention


def quantized_attention(
    queries: mx.array,
    q_keys: Quantized,
    q_values: Quantized,
    scale: float,
    mask: Any,
    group_size: int = 64,
    bits: int = 8,
) -> mx.array:
    """softmax(scale * q k^T + mask) v over quantized keys and values, as mlx-lm's function:
    queries (rows, query heads, L, dim), keys/values (rows, KV heads, positions, ...), mask
    None, "causal", booleans or additive, broadcastable to (rows, heads, L, positions)."""
    rows, positions = q_keys[0].shape[0], q_keys[0].shape[-2]
    if queries.shape[2] >= DEQUANTIZED_FROM or rows * positions <= SHORT_HISTORY:
        return dequantized_attention(queries, q_keys, q_values, scale, mask, group_size, bits)
    return kernel_attention(queries, q_keys, q_values, scale, mask, group_size, bits)


def dequantized_attention(
    queries: mx.array,
    q_keys: Quantized,
    q_values: Quantized,
    scale: float,
    mask: Any,
    group_size: int,
    bits: int,
) -> mx.array:
    """The fused float kernel over this layer's history dequantized."""
    keys, values = (history(q, group_size).astype(queries.dtype) for q in (q_keys, q_values))
    return mx.fast.scaled_dot_product_attention(queries, keys, values, scale=scale, mask=mask)


def kernel_attention(
    queries: mx.array,
    q_keys: Quantized,
    q_values: Quantized,
    scale: float,
    mask: Any,
    group_size: int,
    bits: int,
) -> mx.array:
    """`mx.quantized_matmul` on the packed history, the query heads of one KV head together."""
    rows, heads, length, dim = queries.shape
    kv_heads = q_keys[0].shape[-3]
    repeats = heads // kv_heads
    grouped = (queries * scale).reshape(rows, kv_heads, repeats * length, dim)
    v_words, v_scales, v_biases = q_values
    # The keys in float, then a matmul: mx.quantized_matmul with transpose=True (a dot over
    # head dim per position) took 9.7 ms where reading the bytes and a float matmul take 2.9
    # (8 rows x 4,096 positions, 3 KV heads x 64, 8 bits). One layer's keys in float exist
    # during the step (1 / (2 x layers) of a full-precision cache), then are freed.
    scores = grouped @ history(q_keys, group_size).astype(grouped.dtype).swapaxes(-1, -2)
    if mask is not None:
        grouped_mask = _grouped_mask(mask, kv_heads, repeats, length, scores.shape[-1])
        if grouped_mask.dtype == mx.bool_:
            scores = mx.where(grouped_mask, scores, mx.finfo(scores.dtype).min)
        else:
            scores = scores + grouped_mask
    weights = mx.softmax(scores, axis=-1, precise=True)
    out = mx.quantized_matmul(
        weights, v_words, v_scales, v_biases, transpose=False, group_size=group_size, bits=bits
    )
    return out.reshape(rows, heads, length, dim)


def _grouped_mask(mask: Any, kv_heads: int, repeats: int, length: int, keys: int) -> mx.array:
    """`mask` laid out as the grouped scores: (rows or 1, 1 or KV heads, repeats * L, keys)."""
    if isinstance(mask, str):  # "causal": the last `length` positions are the queries
        mask = mx.arange(keys - length, keys)[:, None] >= mx.arange(keys)[None]
    while mask.ndim < 4:
        mask = mask[None]
    batch, mask_heads = mask.shape[0], mask.shape[1]
    if mask_heads == 1:
        spread = mx.broadcast_to(mask[:, :, None], (batch, 1, repeats, length, keys))
        return spread.reshape(batch, 1, repeats * length, keys)
    full = mx.broadcast_to(mask, (batch, mask_heads, length, keys))
    return full.reshape(batch, kv_heads, repeats * length, keys)


def stored_bits(stored: Quantized, group_size: int) -> int:
    """The bits of keys or values as the cache stores them, from the triple's shapes (32-bit
    words per group of elements)."""
    words, scales = stored[0], stored[1]
    return int(words.shape[-1] * 32 // (scales.shape[-1] * group_size))


def history(stored: Quantized, group_size: int) -> mx.array:
    """Keys or values as the cache stores them, as one float array (dequantized)."""
    return dequantized(stored, group_size, stored_bits(stored, group_size))


def dequantized(triple: Quantized, group_size: int, bits: int) -> mx.array:
    """`mx.dequantize`'s values bit for bit (scale * level + bias per group), read from the
    packed words as bytes: on a CPU `mx.dequantize` took ~4x as long (9.9 ms against 2.3 ms
    for 8 rows x 2,048 positions of 3 heads x 64)."""
    words, scales, biases = triple
    levels = _levels(words, bits).astype(scales.dtype)
    shape = levels.shape
    grouped = levels.reshape(*shape[:-1], shape[-1] // group_size, group_size)
    return (grouped * scales[..., None] + biases[..., None]).reshape(shape)


def _levels(words: mx.array, bits: int) -> mx.array:
    """Packed uint32 words -> each element's level as uint8 (uint16 at 16 bits; mx.quantize
    packs little-endian, the first element in the lowest bits)."""
    if bits == 16:
        return words.view(mx.uint16)
    as_bytes = words.view(mx.uint8)
    if bits == 8:
        return as_bytes
    if bits != 4:
        raise ValueError(f"unpacking {bits}-bit KV is not supported")
    low, high = as_bytes & 15, as_bytes >> 4
    return mx.stack([low, high], axis=-1).reshape(*as_bytes.shape[:-1], -1)
