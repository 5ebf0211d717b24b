"""A continuous batch's quantized KV cache: mlx-lm's `BatchKVCache` contract over quantized rows.

mlx-lm has `QuantizedKVCache` for one sequence and `BatchKVCache` (full precision) for a batch.
`BatchQuantizedKVCache` is the second with the first's storage: each of keys and values is the
triple `mx.quantize` gives (packed uint32 words, scales, biases), all with the batch layout
(rows, KV heads, positions, last axis), rows left-padded to a shared write position `_idx`.
Its `bits` and `group_size` make mlx-lm's attention (`models.base.scaled_dot_product_attention`)
run on the quantized arrays through `quantized_matmul`, so no full-precision copy of the
history is ever made. It keeps the methods `BatchGenerator` and mlxd call on a batch cache:
`merge` of single rows, `extend`, `filter`, `extract`, `prepare`/`finalize` (right padding,
also used to rewind rows for speculation), `trim`, `make_mask`.

`RowQuantizedKVCache` is one sequence's cache (mlx-lm's `QuantizedKVCache`, plus `merge` and
`size`): what a new sequence starts with, what `extract` gives back and what the prefix cache
keeps, so its snapshots stay quantized.
"""

from __future__ import annotations

from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.base import create_causal_mask
from mlx_lm.models.cache import KVCache, QuantizedKVCache, _BaseCache, dynamic_roll

Quantized = tuple[mx.array, ...]  # (packed words, scales, biases), axis 2 the positions
HALF = 16  # key bits stored as 16-bit levels (quantized16), which mx.quantize does not offer
LEVELS16 = 65535.0


def quantized(x: mx.array, group_size: int, bits: int) -> Quantized:
    """`x` as the cache stores it: `mx.quantize`'s triple, or at HALF bits `quantized16`'s."""
    if bits == HALF:
        return quantized16(x, group_size)
    return tuple(mx.quantize(x, group_size=group_size, bits=bits))


def quantized16(x: mx.array, group_size: int) -> Quantized:
    """`x` as 16-bit levels per group, a triple shaped as mx.quantize's (uint32 words holding
    two levels each, little-endian; a float32 scale and bias per group): level =
    round((x - min) / scale), scale = (max - min) / 65535. Why not float16: mlx's CPU widens
    float16 to float32 at ~1/8 of the speed it reads bytes or bfloat16 (4.8 against 0.6 ms
    for 8 rows x 4,096 positions x 3 heads x 64), which decode pays for every key each step;
    bfloat16's 8-bit mantissa moved the demo model's greedy answers (agreement 0.86 against
    float16's 0.97); 16-bit levels are finer than float16 within a group's range and read
    as fast as bytes. The scales stay float32: in a bfloat16 model's dtype they would undo
    the levels' precision."""
    shape = x.shape
    grouped = x.astype(mx.float32).reshape(*shape[:-1], shape[-1] // group_size, group_size)
    low = grouped.min(axis=-1, keepdims=True)
    scale = (grouped.max(axis=-1, keepdims=True) - low) / LEVELS16
    steps = mx.where(scale > 0, scale, mx.ones_like(scale))  # a flat group: all levels 0
    levels = mx.clip(mx.round((grouped - low) / steps), 0.0, LEVELS16).astype(mx.uint16)
    words = levels.reshape(shape).view(mx.uint32)
    return words, scale[..., 0], low[..., 0]


class RowQuantizedKVCache(QuantizedKVCache):
    """One sequence's quantized KV cache, which a batch can be built from (`merge`). Its keys
    may have bits of their own (`key_bits`, HALF: 16-bit levels), so it writes as the batch does
    rather than as mlx-lm's QuantizedKVCache (one `bits` for both)."""

    keys: Any  # Quantized | None, as mlx-lm's QuantizedKVCache sets them
    values: Any
    offset: int
    group_size: int
    bits: int

    def __init__(self, group_size: int = 64, bits: int = 8, key_bits: int = 0) -> None:
        super().__init__(group_size=group_size, bits=bits)
        self.key_bits = key_bits or bits

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Quantized, Quantized]:
        prev, new = self.offset, keys.shape[2]
        fresh = (
            quantized(keys, self.group_size, self.key_bits),
            quantized(values, self.group_size, self.bits),
        )
        if self.keys is None or prev + new > self.keys[0].shape[2]:
            room = (self.step + new - 1) // self.step * self.step
            rows, heads = keys.shape[0], keys.shape[1]
            held = (self.keys, self.values)
            self.keys, self.values = (
                _zeros_like(part, rows, heads, room)
                if arrays is None
                else tuple(
                    mx.concatenate([a[..., :prev, :], z], axis=2)
                    for a, z in zip(arrays, _zeros_like(part, rows, heads, room), strict=True)
                )
                for arrays, part in zip(held, fresh, strict=True)
            )
        for buffers, part in zip((self.keys, self.values), fresh, strict=True):
            for buffer, written in zip(buffers, part, strict=True):
                buffer[..., prev : prev + new, :] = written
        self.offset = prev + new
        return tuple(a[..., : self.offset, :] for a in self.keys), tuple(
            a[..., : self.offset, :] for a in self.values
        )

    @property
    def state(self) -> tuple[Any, ...]:
        return self.keys, self.values, self.offset, self.group_size, self.bits, self.key_bits

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.keys, self.values, self.offset, self.group_size, self.bits = v[:5]
        self.key_bits = v[5] if len(v) > 5 else self.bits

    def size(self) -> int:
        return int(self.offset)

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchQuantizedKVCache:
        first = caches[0]
        return BatchQuantizedKVCache.merge(caches, first.group_size, first.bits, first.key_bits)


class BatchQuantizedKVCache(_BaseCache):
    """Left-padded quantized KV rows of a batch (see the module docstring)."""

    step = 256

    def __init__(
        self, left_padding: list[int], group_size: int, bits: int, key_bits: int = 0
    ) -> None:
        self.keys: Quantized | None = None
        self.values: Quantized | None = None
        self.left_padding = mx.array(left_padding)
        self.offset = mx.array([-p for p in left_padding])
        self._idx = 0
        self._right_padding: mx.array | None = None
        self.group_size = group_size
        self.bits = bits  # the values'; mlx-lm's attention passes it (the keys' is their shape)
        self.key_bits = key_bits or bits

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Quantized, Quantized]:
        """Quantize and write `keys`/`values` (rows, heads, new positions, dim) at the write
        position; returns every position so far, quantized."""
        prev, new = self._idx, keys.shape[2]
        if self.keys is None or self.values is None or prev + new > self.keys[0].shape[2]:
            self._grow(keys, values, prev + new)
        assert self.keys is not None and self.values is not None
        for buffers, fresh, bits in (
            (self.keys, keys, self.key_bits),
            (self.values, values, self.bits),
        ):
            for buffer, part in zip(buffers, quantized(fresh, self.group_size, bits), strict=True):
                buffer[..., prev : prev + new, :] = part
        self.offset = self.offset + new
        self._idx = prev + new
        return self.keys_and_values()

    def _grow(self, keys: mx.array, values: mx.array, needed: int) -> None:
        """Room for `needed` positions, in whole steps (as BatchKVCache grows)."""
        rows, heads = keys.shape[0], keys.shape[1]
        steps = (needed - self._idx + self.step - 1) // self.step * self.step
        one_k = quantized(keys[:, :, :1], self.group_size, self.key_bits)
        fresh_k = _zeros_like(one_k, rows, heads, steps)
        fresh_v = _zeros_like(
            quantized(values[:, :, :1], self.group_size, self.bits), rows, heads, steps
        )
        if self.keys is None or self.values is None:
            self.keys, self.values = fresh_k, fresh_v
            return
        held = self._idx
        self.keys = tuple(
            mx.concatenate([a[..., :held, :], b], axis=2)
            for a, b in zip(self.keys, fresh_k, strict=True)
        )
        self.values = tuple(
            mx.concatenate([a[..., :held, :], b], axis=2)
            for a, b in zip(self.values, fresh_v, strict=True)
        )

    def keys_and_values(self) -> tuple[Quantized, Quantized]:
        assert self.keys is not None and self.values is not None
        n = self._idx
        return tuple(a[..., :n, :] for a in self.keys), tuple(a[..., :n, :] for a in self.values)

    def prepare(
        self,
        *,
        left_padding: list[int] | None = None,
        lengths: list[int] | None = None,
        right_padding: list[int] | None = None,
    ) -> None:
        """As BatchKVCache: more left padding (empty cache only), or right padding that
        `finalize` rolls into the left once the padded chunk is written."""
        if left_padding is not None:
            if self.keys is not None:
                raise ValueError("left padding can only be added to an empty cache")
            pad = mx.array(left_padding)
            self.left_padding = self.left_padding + pad
            self.offset = self.offset - pad
        if right_padding is not None and max(right_padding) > 0:
            self._right_padding = mx.array(right_padding)

    def finalize(self) -> None:
        padding = self._right_padding
        if padding is None:
            return
        assert self.keys is not None and self.values is not None
        shift = padding[:, None]
        self.keys = tuple(
            dynamic_roll(a, shift, axis=2)  # type: ignore[no-untyped-call]
            for a in self.keys
        )
        self.values = tuple(
            dynamic_roll(a, shift, axis=2)  # type: ignore[no-untyped-call]
            for a in self.values
        )
        self.offset = self.offset - padding
        self.left_padding = self.left_padding + padding
        self._right_padding = None

    @property
    def state(self) -> tuple[Any, ...]:
        return self.keys, self.values, self.offset, self.left_padding, self._idx

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.keys, self.values, self.offset, self.left_padding, self._idx = v

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self._idx, n)
        self._idx -= n
        self.offset = self.offset - n
        return n

    def make_mask(self, N: int, return_array: bool = False, **kwargs: Any) -> mx.array:  # noqa: N803 - mlx-lm's name
        mask: mx.array = create_causal_mask(
            N, offset=self._idx, left_padding=self.left_padding, **kwargs
        )
        return mask

    def filter(self, batch_indices: mx.array | list[int]) -> None:
        """Keep these rows, in place, and drop the left padding they all share."""
        if self.keys is not None and self.values is not None:
            self.keys = tuple(a[batch_indices] for a in self.keys)
            self.values = tuple(a[batch_indices] for a in self.values)
        self.offset = self.offset[batch_indices]
        self.left_padding = self.left_padding[batch_indices]
        shared = min(cast("list[int]", self.left_padding.tolist()))
        if shared > 0:
            if self.keys is not None and self.values is not None:
                self.keys = tuple(a[..., shared:, :] for a in self.keys)
                self.values = tuple(a[..., shared:, :] for a in self.values)
            self._idx -= shared
            self.left_padding = self.left_padding - shared

    def extend(self, other: BatchQuantizedKVCache) -> None:
        """Append `other`'s rows, in place: both are padded so their rows end at one write
        position in buffers of one length."""
        if self.keys is None and other.keys is None:
            self.left_padding = mx.concatenate([self.left_padding, other.left_padding])
            self.offset = mx.concatenate([self.offset, other.offset])
            return
        template = other if self.keys is None else self
        assert template.keys is not None and template.values is not None
        index = max(self._idx, other._idx)
        length = max(_length(self.keys), _length(other.keys))
        mine = _aligned(self, template, index, length)
        theirs = _aligned(other, template, index, length)
        self.keys = tuple(mx.concatenate([a, b]) for a, b in zip(mine[0], theirs[0], strict=True))
        self.values = tuple(mx.concatenate([a, b]) for a, b in zip(mine[1], theirs[1], strict=True))
        self.offset = mx.concatenate([self.offset, other.offset])
        self.left_padding = mx.concatenate(
            [self.left_padding + (index - self._idx), other.left_padding + (index - other._idx)]
        )
        self._idx = index

    def extract(self, idx: int) -> RowQuantizedKVCache:
        """Row `idx` alone, without its padding (its own buffers)."""
        row = RowQuantizedKVCache(self.group_size, self.bits, self.key_bits)
        if self.keys is None or self.values is None:
            return row
        pad = cast(int, self.left_padding[idx].item())
        end = self._idx
        row.keys = tuple(mx.contiguous(a[idx : idx + 1, :, pad:end]) for a in self.keys)
        row.values = tuple(mx.contiguous(a[idx : idx + 1, :, pad:end]) for a in self.values)
        row.offset = end - pad
        return row

    @classmethod
    def merge(
        cls, caches: list[Any], group_size: int, bits: int, key_bits: int = 0
    ) -> BatchQuantizedKVCache:
        """One batch of these single-sequence caches, left-padded to the longest (a full
        precision `KVCache` among them is quantized first)."""
        key_bits = key_bits or bits
        rows = [_as_quantized(c, group_size, bits, key_bits) for c in caches]
        lengths = [int(c.offset) for c in rows]
        longest = max(lengths, default=0)
        padding = [longest - n for n in lengths]
        cache = cls(padding, group_size, bits, key_bits)
        filled = [c for c in rows if c.keys is not None]
        if longest == 0 or not filled:
            return cache
        heads = filled[0].keys[0].shape[1]
        keys = _zeros_like(filled[0].keys, len(rows), heads, longest)
        values = _zeros_like(filled[0].values, len(rows), heads, longest)
        for i, (pad, row) in enumerate(zip(padding, rows, strict=True)):
            if row.keys is None or not row.offset:
                continue
            for buffer, part in zip(keys + values, (*row.keys, *row.values), strict=True):
                buffer[i : i + 1, :, pad:] = part[..., : row.offset, :]
        cache.keys, cache.values = keys, values
        cache.offset = cache.offset + longest
        cache._idx = longest
        return cache

    def size(self) -> int:
        return self._idx

    def empty(self) -> bool:
        return self.keys is None

    @property
    def nbytes(self) -> int:
        if self.keys is None or self.values is None:
            return 0
        return sum(a.nbytes for a in (*self.keys, *self.values))


def _zeros_like(arrays: Quantized, rows: int, heads: int, positions: int) -> Quantized:
    return tuple(mx.zeros((rows, heads, positions, a.shape[-1]), dtype=a.dtype) for a in arrays)


def _length(arrays: Quantized | None) -> int:
    return 0 if arrays is None else int(arrays[0].shape[2])


def _aligned(
    cache: BatchQuantizedKVCache, template: BatchQuantizedKVCache, index: int, length: int
) -> tuple[Quantized, Quantized]:
    """`cache`'s buffers padded so its rows end at `index`, `length` positions long (an empty
    cache becomes zeros shaped like `template`'s)."""
    left = index - cache._idx
    out = []
    for arrays, like in ((cache.keys, template.keys), (cache.values, template.values)):
        assert like is not None
        if arrays is None:
            rows = cache.offset.shape[0]
            arrays = _zeros_like(like, rows, like[0].shape[1], 0)
        right = length - arrays[0].shape[2] - left
        if right < 0:
            arrays = tuple(a[..., :right, :] for a in arrays)
            right = 0
        if left or right:
            arrays = tuple(mx.pad(a, [(0, 0), (0, 0), (left, right), (0, 0)]) for a in arrays)
        out.append(arrays)
    return out[0], out[1]


def _as_quantized(cache: Any, group_size: int, bits: int, key_bits: int) -> Any:
    if isinstance(cache, KVCache):
        row = RowQuantizedKVCache(group_size, bits, key_bits)
        if cache.keys is not None and cache.values is not None:
            row.update_and_fetch(
                cache.keys[..., : cache.offset, :], cache.values[..., : cache.offset, :]
            )
        return row
    return cache
