"""Models whose cache the batch cannot hold: served one sequence at a time.

mlx-lm's BatchGenerator builds a batch cache with each layer's `merge` (even of one sequence's
cache) and then `filter`s, `extract`s and `extend`s it; mlx-lm 0.32.2's ChunkedKVCache (llama4),
ConcatenateKVCache and QuantizedKVCache have no `merge`, so such a sequence fails as it joins
the batch. In a batch of one row none of that has anything to do: `one_row_cache` gives every
layer a class whose merge of one cache is that cache, whose `extract(0)` is the layer itself
and whose `filter([0])` keeps it, so the model steps on its own caches exactly as in mlx-lm's
one-sequence generate (its other layers too: llama4 reads a KVCache's `offset` as an int, a
BatchKVCache's is an array). The runner keeps such a model's batch at one row (BatchRunner);
more rows raise.
"""

from __future__ import annotations

from typing import Any

from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.mlx_lm.compat import PromptCache


def unbatchable_layers(model: Any) -> list[str]:
    """Class names of the model's cache layers the batch cannot merge (none: batchable)."""
    names = {
        type(layer).__name__ for layer in make_prompt_cache(model) if not hasattr(layer, "merge")
    }
    return sorted(names)


def one_row_cache(cache: PromptCache) -> PromptCache:
    """`cache` (one sequence's) made fit for a one-row batch, in place."""
    for layer in cache:
        if not isinstance(layer, _OneRow):
            layer.__class__ = _one_row_class(type(layer))
    return cache


_CLASSES: dict[type, type] = {}


def _one_row_class(cls: type) -> type:
    found = _CLASSES.get(cls)
    if found is None:
        found = _CLASSES[cls] = type(f"OneRow{cls.__name__}", (_OneRow, cls), {})
    return found


class _OneRow:
    """The batch-cache methods BatchGenerator calls, for a batch of one row."""

    @classmethod
    def merge(cls, caches: list[Any]) -> Any:
        if len(caches) != 1:
            raise ValueError(f"{cls.__name__} serves one sequence at a time")
        return caches[0]

    def extract(self, idx: int) -> Any:
        _one(idx == 0)
        return self

    def filter(self, keep: list[int]) -> None:
        _one(keep == [0])

    def extend(self, other: Any) -> None:
        _one(False)


def _one(holds: bool) -> None:
    if not holds:
        raise ValueError("this model's cache serves one sequence at a time")
