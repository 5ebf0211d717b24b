"""backend.mlx_lm.one_row: which cache layers the batch cannot merge, and one sequence's cache
made fit for a one-row batch (merge of one is itself; more rows raise)."""

from __future__ import annotations

import pytest
from mlx_lm.models.cache import ChunkedKVCache, ConcatenateKVCache, KVCache, QuantizedKVCache

from mlxd.backend.mlx_lm.one_row import one_row_cache, unbatchable_layers


class _Model:
    """What make_prompt_cache needs of a model: its make_cache()."""

    def __init__(self, *layers: tuple[type, tuple[object, ...]]) -> None:
        self.layers = layers

    def make_cache(self) -> list[object]:
        return [cls(*args) for cls, args in self.layers]


_model = _Model


def test_layers_without_merge_are_named_once() -> None:
    model = _model(
        (ConcatenateKVCache, ()), (QuantizedKVCache, ()), (ChunkedKVCache, (8,)),
        (ChunkedKVCache, (8,)), (KVCache, ()),
    )  # fmt: skip
    assert unbatchable_layers(model) == ["ChunkedKVCache", "ConcatenateKVCache", "QuantizedKVCache"]
    assert unbatchable_layers(_model((KVCache, ()))) == []


def test_a_one_row_cache_merges_filters_and_extracts_only_one_row() -> None:
    cache = one_row_cache([ChunkedKVCache(8), KVCache()])
    assert one_row_cache(cache) is cache  # idempotent
    for layer in cache:
        assert type(layer).merge([layer]) is layer  # type: ignore[attr-defined]
        assert layer.extract(0) is layer  # type: ignore[attr-defined]
        layer.filter([0])  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="one sequence at a time"):
            type(layer).merge([layer, layer])  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="one sequence at a time"):
            layer.filter([0, 1])  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="one sequence at a time"):
            layer.extend(layer)  # type: ignore[attr-defined]
    assert isinstance(cache[0], ChunkedKVCache) and isinstance(cache[1], KVCache)
