"""Each row's M-RoPE position delta, carried by layer 0 of its KV cache through mlx-lm's batch.

A Qwen-VL text model rotates each token by 3-axis positions. Text after an image sits at
`KV offset + delta`, where delta (<= 0) is what the prompt's images shift it by, fixed once the
prompt is prefilled. mlx-lm's BatchGenerator calls the model with `(tokens, cache)` only and
moves rows between batches itself (merge at prefill, split, extend into the decode batch,
filter on finish or cancel, extract for the prefix cache), so the delta must travel with the
cache: a row's first attention layer's cache (mlx-lm's KVCache, or backend.kv's quantized one;
layer 0, or the first after recurrent layers, which count no positions) takes on a subclass
that holds its delta (`carry_delta`), whose `merge` gives the batch cache a subclass
keeping one delta per row, in row order, through `filter`/`extend`. A rewind
(speculation's `trim`) moves the offset and leaves the delta, as it should. mlx-vlm's own
loop keeps one `_rope_deltas` on the language model for its whole batch; that cannot follow
rows admitted and dropped at every step, hence these classes.

Snapshots leave as plain caches (`without_delta`, at every store): the delta is set again at
each insert from that request's own prompt, so a cache cut to a shorter prefix is never wrong.
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx

from mlxd.backend.mlx_lm.compat import PromptCache

__all__ = ["carry_delta", "row_positions", "without_delta"]


class RowDelta:
    """Mixed into a sequence's layer-0 cache class: that row's position delta."""

    rope_delta = 0
    plain: type  # the class it was before carry_delta

    @classmethod
    def merge(cls, caches: list[Any], *args: Any, **kwargs: Any) -> Any:
        return _with_deltas(super().merge(caches, *args, **kwargs), caches)  # type: ignore[misc]


class BatchDelta:
    """Mixed into a batch's layer-0 cache class: one position delta per row, in row order."""

    rope_deltas: mx.array
    plain: Any  # the batch cache class it was merged as

    @classmethod
    def merge(cls, caches: list[Any], *args: Any, **kwargs: Any) -> Any:
        """As the batch class merges rows (some mlx-vlm language models, Qwen3.5's, split and
        merge their batch caches themselves, calling this on the batch cache's own class)."""
        return _with_deltas(cls.plain.merge(caches, *args, **kwargs), caches)

    def extract(self, idx: int) -> Any:
        """The row's cache, still carrying its delta (snapshots drop it: without_delta)."""
        row = super().extract(idx)  # type: ignore[misc]
        row.__class__ = row_class(type(row))
        delta: Any = self.rope_deltas[idx].item()
        row.rope_delta = int(delta)
        return row

    def filter(self, batch_indices: Any) -> None:
        super().filter(batch_indices)  # type: ignore[misc]
        rows = batch_indices if isinstance(batch_indices, mx.array) else mx.array(batch_indices)
        self.rope_deltas = self.rope_deltas[rows.astype(mx.int32)]

    def extend(self, other: Any) -> None:
        theirs = getattr(other, "rope_deltas", None)
        if theirs is None:  # a batch cache of rows without a delta (text rows: 0)
            theirs = mx.zeros((int(other.offset.shape[0]),), mx.int32)
        super().extend(other)  # type: ignore[misc]
        self.rope_deltas = mx.concatenate([self.rope_deltas, theirs])


_CLASSES: dict[tuple[type, type], type] = {}  # (mixin, cache class) -> their subclass


def row_class(plain: type) -> type:
    """`plain` (a row cache class) with a delta; its extract gives `plain`'s own rows back."""
    return _subclass(RowDelta, plain)


def batch_class(plain: type) -> type:
    return _subclass(BatchDelta, plain)


def _subclass(mixin: type, plain: type) -> type:
    made = _CLASSES.get((mixin, plain))
    if made is None:
        made = type(f"RowDelta{plain.__name__}", (mixin, plain), {"plain": plain})
        _CLASSES[mixin, plain] = made
    return made


def _with_deltas(batch: Any, caches: list[Any]) -> Any:
    """`batch`, merged from `caches` in order, as a batch class keeping their deltas."""
    batch.__class__ = batch_class(type(batch))
    batch.rope_deltas = mx.array([getattr(c, "rope_delta", 0) for c in caches], mx.int32)
    return batch


def carry_delta(cache: PromptCache, delta: int) -> PromptCache:
    """Give a sequence's fresh or private cache (a list of per-layer caches) its position
    delta on its first attention layer, before it is inserted into the batch."""
    layer = cache[_carrier(cache)]
    plain = layer.plain if isinstance(layer, RowDelta) else type(layer)
    if not hasattr(plain, "merge") or hasattr(layer, "rope_deltas"):
        raise TypeError(f"an M-RoPE model's first cache layer is a {plain.__name__}")
    layer.__class__ = row_class(plain)
    layer.rope_delta = delta  # type: ignore[attr-defined]
    return cache


def without_delta(cache: PromptCache) -> PromptCache:
    """`cache` with layer 0 back in its own class (the prefix cache and its files hold only
    mlx-lm's and backend.kv's classes); the original is left as it is, still usable by its row."""
    at = _carrier(cache)
    layer = cache[at] if cache else None
    if not isinstance(layer, RowDelta):
        return cache
    plain = copy.copy(layer)
    plain.__class__ = layer.plain
    vars(plain).pop("rope_delta", None)
    return [*cache[:at], plain, *cache[at + 1 :]]


def row_positions(cache: Any, rows: int, length: int) -> mx.array:
    """Each row's positions for the next `length` tokens, shape (rows, length): the row's KV
    offset plus its delta, counting on."""
    layer = cache[_carrier(cache)] if cache else None
    offset = getattr(layer, "offset", 0)
    if isinstance(offset, mx.array) and offset.ndim > 0:  # a batch cache
        start = offset + getattr(layer, "rope_deltas", 0)
    else:
        start = mx.array([int(offset) + int(getattr(layer, "rope_delta", 0))] * rows)
    return start[:, None] + mx.arange(length, dtype=mx.int32)[None, :]


def _carrier(cache: Any) -> int:
    """The first layer that counts positions (recurrent layers have no offset)."""
    return next((i for i, layer in enumerate(cache) if hasattr(layer, "offset")), 0)
