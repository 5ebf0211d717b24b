"""Quantized KV whose most recent positions stay full precision (`--kv-quant-start N`).

Every position is stored quantized as `BatchQuantizedKVCache` stores it; the last N (+
`SPARE`) positions of each row are also kept in full precision (the tail). Attention gets
both copies side by side, the history dequantized then the tail, and a mask that lets each
query see a key exactly when it is within N positions of that query (and the tail holds
it), its quantized copy otherwise. So what a query sees depends on its distance alone, not
on how its prompt was chunked or batched: alone equals batched. While every position is
still within N of every query the cache is plain full precision (the tail alone, the
usual causal mask), so a long enough N equals unquantized output exactly.

Rows end at one write position in a left-padded batch, so the tail is the same buffer
positions for every row; `valid[r]` counts those that hold row r's exact values. A
right-padded chunk (prepare/finalize) keeps its padding in the tail until the roll, and a
rewind (trim, roll) drops the rewound positions from it; `SPARE` more positions keep the
window whole after rewinds of up to `SPARE` (speculation verifies at most 16 drafts). A
position that left the tail is never exact again. The caches have no `bits` attribute, so
mlx-lm's attention takes its float path. `kv_footprint` counts the tail as a window.
"""

from __future__ import annotations

from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import _BaseCache, dynamic_roll

from mlxd.backend.kv.attention import history
from mlxd.backend.kv.quantized_batch import BatchQuantizedKVCache, Quantized, RowQuantizedKVCache

SPARE = 16  # tail positions beyond N, so rewinds (rejected drafts) keep the window exact
Tail = tuple[mx.array, mx.array]  # full-precision keys, values: (rows, heads, T, dim)


class RowFullTailKVCache(_BaseCache):
    """One sequence's cache: a `RowQuantizedKVCache` plus the full-precision tail."""

    def __init__(self, group_size: int, bits: int, recent: int, key_bits: int = 0) -> None:
        self.inner = RowQuantizedKVCache(group_size, bits, key_bits)
        self.recent = recent
        self.tail: Tail | None = None  # (1, heads, <= recent + SPARE, dim) each

    @property
    def offset(self) -> int:
        return int(self.inner.offset)

    @property
    def kv_bits(self) -> int:
        return int(self.inner.bits)

    @property
    def group_size(self) -> int:
        return int(self.inner.group_size)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        short = _short(self.offset, _held(self.tail), keys.shape[2], self.recent)
        quantized = self.inner.update_and_fetch(keys, values)
        tail = _append(self.tail, keys, values)
        self.tail = _cut(tail, self.recent + SPARE)
        return _fetch(quantized, tail, short, self)

    def make_mask(self, n: int, **kwargs: Any) -> Any:
        held = _held(self.tail)
        if _short(self.offset, held, n, self.recent):
            return self.inner.make_mask(n, **kwargs)  # type: ignore[no-untyped-call]
        one = mx.array([0])
        return _two_part_mask(n, self.offset, held, one + held, one, self.recent)

    def size(self) -> int:
        return self.offset

    def empty(self) -> bool:
        return self.inner.keys is None

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Cut the last `n` positions, unless that leaves one within N of the end without its
        exact copy (more than SPARE past a full tail): then nothing is cut (returns 0), and
        the prefix cache takes the snapshot for a miss rather than serve it inexactly."""
        n = min(n, self.offset)
        if _held(self.tail) - n < min(self.recent, self.offset - n):
            return 0
        n = int(self.inner.trim(n))  # type: ignore[no-untyped-call]
        if self.tail is not None:
            self.tail = _drop_last(self.tail, n)
        return n

    @property
    def state(self) -> tuple[Any, ...]:
        return self.inner.state, self.tail

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.inner.state = v[0]
        self.tail = None if v[1] is None else (v[1][0], v[1][1])

    @property
    def nbytes(self) -> int:
        return int(self.inner.nbytes) + _tail_bytes(self.tail)

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchFullTailKVCache:
        return BatchFullTailKVCache.merge(caches)


class BatchFullTailKVCache(_BaseCache):
    """A batch of `RowFullTailKVCache` rows (see the module docstring)."""

    def __init__(self, inner: BatchQuantizedKVCache, recent: int, valid: list[int]) -> None:
        self.inner = inner
        self.recent = recent
        self.tail: Tail | None = None  # (rows, heads, T, dim) each, ending at the write position
        self.valid = mx.array(valid)  # per row: how many of the last T positions are exact
        self._rolling: mx.array | None = None  # right padding of the chunk being written

    @property
    def offset(self) -> mx.array:
        return self.inner.offset

    @property
    def left_padding(self) -> mx.array:
        return self.inner.left_padding

    @property
    def kv_bits(self) -> int:
        return self.inner.bits

    @property
    def group_size(self) -> int:
        return self.inner.group_size

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        new = keys.shape[2]
        short = _short(self.inner.size(), _held(self.tail), new, self.recent)
        quantized = self.inner.update_and_fetch(keys, values)
        tail = _append(self.tail, keys, values)
        extra = 0 if self._rolling is None else int(max(cast("list[int]", self._rolling.tolist())))
        limit = self.recent + SPARE + extra
        self.tail = _cut(tail, limit)
        self.valid = mx.minimum(self.valid + new, limit)
        return _fetch(quantized, tail, short, self)

    def make_mask(self, n: int, **kwargs: Any) -> Any:
        held, index = _held(self.tail), self.inner.size()
        if _short(index, held, n, self.recent):
            return self.inner.make_mask(n, **kwargs)
        return _two_part_mask(n, index, held, self.valid + n, self.left_padding, self.recent)

    def prepare(self, **padding: list[int] | None) -> None:
        """As the quantized rows' (left_padding, lengths, right_padding); a right padding
        stays in the tail until `finalize` rolls it out."""
        self.inner.prepare(**padding)
        right_padding = padding.get("right_padding")
        if right_padding is not None and max(right_padding) > 0:
            self._rolling = mx.array(right_padding)

    def finalize(self) -> None:
        """Roll each row's padding out of its tail (as the quantized rows roll)."""
        self.inner.finalize()
        if self._rolling is not None and self.tail is not None:
            shift = self._rolling[:, None]
            rolled = [dynamic_roll(a, shift, axis=2) for a in self.tail]  # type: ignore[no-untyped-call]
            self.tail = (rolled[0], rolled[1])
            self.valid = mx.maximum(self.valid - self._rolling, 0)
        self._rolling = None
        self._keep(self.recent + SPARE)

    def _keep(self, positions: int) -> None:
        """At most the last `positions` tail positions, and no more than the rows hold."""
        if self.tail is not None:
            self.tail = _cut(self.tail, min(positions, self.inner.size()))
            self.valid = mx.minimum(self.valid, _held(self.tail))

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = self.inner.trim(n)
        if self.tail is not None:
            self.tail = _drop_last(self.tail, n)
            self.valid = mx.maximum(self.valid - n, 0)
        return n

    def filter(self, batch_indices: mx.array | list[int]) -> None:
        self.inner.filter(batch_indices)
        self.valid = self.valid[batch_indices]
        if self.tail is not None:
            self.tail = (self.tail[0][batch_indices], self.tail[1][batch_indices])
        self._keep(self.recent + SPARE)

    def extend(self, other: BatchFullTailKVCache) -> None:
        """Append `other`'s rows: both tails end at the shared write position, so the shorter
        is padded on the left (positions that are not valid)."""
        rows = int(self.valid.shape[0])
        self.inner.extend(other.inner)
        self.valid = mx.concatenate([self.valid, other.valid])
        like = self.tail or other.tail
        if like is None:
            return
        length = max(_held(self.tail), _held(other.tail))
        mine = _left_padded(self.tail, like, rows, length)
        theirs = _left_padded(other.tail, like, int(other.valid.shape[0]), length)
        self.tail = (mx.concatenate([mine[0], theirs[0]]), mx.concatenate([mine[1], theirs[1]]))

    def extract(self, idx: int) -> RowFullTailKVCache:
        inner = self.inner
        row = RowFullTailKVCache(inner.group_size, inner.bits, self.recent, inner.key_bits)
        row.inner = self.inner.extract(idx)
        if self.tail is not None:
            held, valid = _held(self.tail), int(cast(int, self.valid[idx].item()))
            k, v = (mx.contiguous(a[idx : idx + 1, :, held - valid :]) for a in self.tail)
            row.tail = (k, v)
        return row

    @classmethod
    def merge(cls, caches: list[Any]) -> BatchFullTailKVCache:
        """One batch of these rows, left-padded to the longest."""
        first = caches[0]
        rows = [c.inner for c in caches]
        inner = BatchQuantizedKVCache.merge(
            rows, first.group_size, first.kv_bits, first.inner.key_bits
        )
        valid = [_held(c.tail) for c in caches]
        cache = cls(inner, first.recent, valid)
        like = next((c.tail for c in caches if c.tail is not None), None)
        if like is not None:
            padded = [_left_padded(c.tail, like, 1, max(valid)) for c in caches]
            keys = mx.concatenate([p[0] for p in padded])
            cache.tail = (keys, mx.concatenate([p[1] for p in padded]))
        return cache

    def size(self) -> int:
        return self.inner.size()

    def empty(self) -> bool:
        return self.inner.empty()

    @property
    def state(self) -> tuple[Any, ...]:
        return self.inner.state, self.tail, self.valid

    @state.setter
    def state(self, v: tuple[Any, ...]) -> None:
        self.inner.state, self.tail, self.valid = v

    @property
    def nbytes(self) -> int:
        return self.inner.nbytes + _tail_bytes(self.tail)


def _short(index: int, held: int, new: int, recent: int) -> bool:
    """Whether every key of this step is within `recent` of every query and exact in the
    tail (no position has left it yet): then the tail alone is the attention's input."""
    return index + new <= recent and held == index


def _fetch(
    quantized: tuple[Quantized, Quantized], tail: Tail, short: bool, cache: Any
) -> tuple[mx.array, mx.array]:
    """The attention's keys and values: the tail alone, or every position dequantized and
    the tail after them (the mask picks one copy of each position per query)."""
    if short:
        return tail
    parts = []
    for q, exact in zip(quantized, tail, strict=True):
        full = history(q, cache.group_size)
        parts.append(mx.concatenate([full, exact.astype(full.dtype)], axis=2))
    return parts[0], parts[1]


def _two_part_mask(
    new: int, index: int, held: int, valid: mx.array, left_padding: mx.array, recent: int
) -> mx.array:
    """(rows, 1, new, (index + new) + (held + new)) booleans over [dequantized, tail]: query i
    sees key j exactly when j is in the tail's last `valid[r]`, j <= i and i - j < `recent`,
    else (j <= i, past the row's left padding) its dequantized copy."""
    length, tail_len = index + new, held + new
    queries = (index + mx.arange(new))[None, :, None]
    keys = mx.arange(length)[None, None, :]
    tail_keys = (length - tail_len + mx.arange(tail_len))[None, None, :]
    slot_valid = mx.arange(tail_len)[None, :] >= (tail_len - valid)[:, None]
    exact = slot_valid[:, None, :] & (tail_keys <= queries) & (queries - tail_keys < recent)
    covered = mx.concatenate(
        [mx.zeros((exact.shape[0], new, length - tail_len), dtype=mx.bool_), exact], axis=2
    )
    seen = (keys <= queries) & (keys >= left_padding[:, None, None]) & ~covered
    return mx.concatenate([seen, exact], axis=2)[:, None]


def _append(tail: Tail | None, keys: mx.array, values: mx.array) -> Tail:
    if tail is None:
        return keys, values
    return mx.concatenate([tail[0], keys], axis=2), mx.concatenate([tail[1], values], axis=2)


def _cut(tail: Tail, limit: int) -> Tail:
    """`tail`'s last `limit` positions."""
    held = tail[0].shape[2]
    if held <= limit:
        return tail
    return tail[0][..., held - limit :, :], tail[1][..., held - limit :, :]


def _drop_last(tail: Tail, n: int) -> Tail:
    keep = max(tail[0].shape[2] - n, 0)
    return tail[0][..., :keep, :], tail[1][..., :keep, :]


def _held(tail: Tail | None) -> int:
    return 0 if tail is None else int(tail[0].shape[2])


def _tail_bytes(tail: Tail | None) -> int:
    return 0 if tail is None else int(tail[0].nbytes + tail[1].nbytes)


def _left_padded(tail: Tail | None, like: Tail, rows: int, length: int) -> Tail:
    """`tail` with zeros before it to `length` positions (zeros shaped like `like` when
    None)."""
    out = []
    for i, template in enumerate(like):
        shape = (rows, template.shape[1], 0, template.shape[3])
        part = mx.zeros(shape, dtype=template.dtype) if tail is None else tail[i]
        pad = length - part.shape[2]
        out.append(mx.pad(part, [(0, 0), (0, 0), (pad, 0), (0, 0)]) if pad else part)
    return out[0], out[1]
