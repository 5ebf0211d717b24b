"""backend.mlx_lm.row_deltas: each row's M-RoPE delta follows it through mlx-lm's batch cache
operations, and snapshots leave as mlx-lm's own classes."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import pytest
from mlx_lm.models.cache import ArraysCache, BatchKVCache, KVCache

from mlxd.backend.kv.quantized_batch import BatchQuantizedKVCache, RowQuantizedKVCache
from mlxd.backend.mlx_lm.row_deltas import BatchDelta, carry_delta, row_positions, without_delta


def row(tokens: int, delta: int, quantized: bool = False) -> list[Any]:
    """A one-layer cache holding `tokens` positions, carrying `delta`."""
    layer = RowQuantizedKVCache(group_size=32, bits=8) if quantized else KVCache()  # type: ignore[no-untyped-call]
    if tokens:
        kv = mx.ones((1, 2, tokens, 32))
        layer.update_and_fetch(kv, kv)  # type: ignore[no-untyped-call]
    return carry_delta([layer], delta)


def positions(cache: list[object], rows: int, length: int = 1) -> list[list[int]]:
    out: list[list[int]] = row_positions(cache, rows, length).tolist()
    return out


def merged(*rows: list[Any]) -> Any:
    """The batch cache mlx-lm builds from these rows (the first row's class merges)."""
    return type(rows[0][0]).merge([r[0] for r in rows])


@pytest.mark.parametrize("quantized", [False, True])
def test_merge_keeps_each_rows_delta_and_positions_count_from_its_offset(
    quantized: bool,
) -> None:
    batch = merged(row(5, -3, quantized), row(2, 0, quantized), row(7, -6, quantized))
    plain = BatchQuantizedKVCache if quantized else BatchKVCache
    assert isinstance(batch, BatchDelta) and isinstance(batch, plain)
    assert positions([batch], 3, 2) == [[2, 3], [2, 3], [1, 2]]
    row0 = without_delta([batch.extract(2)])[0]
    assert type(row0) is (RowQuantizedKVCache if quantized else KVCache) and row0.offset == 7
    if not quantized:  # mlx-vlm's Qwen3.5 re-merges its rows through the batch's own class
        again = type(batch).merge([batch.extract(i) for i in (2, 0)])
        assert positions([again], 2) == [[1], [2]]


def test_filter_extend_and_trim_move_the_deltas_with_their_rows() -> None:
    batch = merged(row(5, -3), row(2, 0), row(7, -6))
    batch.filter([0, 2])
    other = merged(row(4, -1))
    batch.extend(other)
    assert positions([batch], 3) == [[2], [1], [3]]
    batch.trim(1)  # type: ignore[no-untyped-call]  # speculation's rewind: the offset only
    assert positions([batch], 3) == [[1], [0], [2]]


def test_extending_with_a_plain_batch_cache_gives_its_rows_delta_zero() -> None:
    batch = merged(row(5, -3))
    plain = BatchKVCache.merge([KVCache()])  # type: ignore[no-untyped-call]
    batch.extend(plain)
    assert positions([batch], 2) == [[2], [0]]
    batch.filter(mx.array([1]))  # speculation's keep_rows passes an array
    assert positions([batch], 1) == [[0]]


def test_snapshots_are_plain_and_the_live_row_keeps_its_delta() -> None:
    live = row(4, -2)
    copy = without_delta(live)
    assert type(copy[0]) is KVCache and copy[0].offset == 4
    assert positions(live, 1) == [[2]] and positions(copy, 1) == [[4]]


def test_only_a_row_cache_carries_a_delta() -> None:
    batch = merged(row(5, -3))
    with pytest.raises(TypeError, match="first cache layer"):
        carry_delta([batch], -1)
    again = row(3, -1)
    assert positions(carry_delta(again, -2), 1) == [[1]]  # a second insert sets it anew
    assert positions([], 2, 3) == [[0, 1, 2], [0, 1, 2]]


def test_the_delta_rides_on_the_first_layer_that_counts_positions() -> None:
    """A hybrid model's recurrent layers (ArraysCache) have no offset: the first attention
    layer carries the delta, and its positions are read there."""
    recurrent = ArraysCache(size=2)  # type: ignore[no-untyped-call]
    cache = [recurrent, *row(5, -3)]
    carry_delta(cache, -3)
    assert cache[0] is recurrent and positions(cache, 1) == [[2]]
    assert type(without_delta(cache)[1]) is KVCache and without_delta(cache)[0] is recurrent
