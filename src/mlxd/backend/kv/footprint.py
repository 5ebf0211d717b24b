"""How many KV bytes a sequence of a model holds per token, measured from its own caches.

One token runs through a fresh cache of the model (`make_prompt_cache`, so at the KV
precision `quantize_kv` set): each layer's arrays then hold exactly one position, whose bytes
are that layer's cost per token (heads x head dims x dtype, or the packed words, scales and
biases of a quantized layer). A rotating (sliding-window) layer costs that up to its window,
a recurrent layer (no token axis) its whole state once. A quantized layer that keeps its
recent N positions in full precision too (`RowFullTailKVCache`) costs the quantized bytes per
token and the full-precision ones as a window of N.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models.cache import ArraysCache, make_prompt_cache

from mlxd.backend.api import KvFootprint
from mlxd.backend.kv.full_tail import SPARE, RowFullTailKVCache


def kv_footprint(model: Any) -> KvFootprint:
    """The model's KvFootprint (runs one token; engine thread, or before the model serves)."""
    cache = make_prompt_cache(model)
    model(mx.array([[0]]), cache=cache)
    return cache_footprint(cache)


def cache_footprint(cache: list[Any]) -> KvFootprint:
    """The KvFootprint of a sequence's cache layers that hold exactly one position (a
    drafter's too: a layer with a `max_size` is a window, whatever library made it)."""
    per_token, fixed = 0, 0
    windows: dict[int, int] = {}
    for layer in cache:
        arrays = _arrays(layer.state)
        if isinstance(layer, ArraysCache):
            fixed += sum(a.nbytes for a in arrays)
            continue
        window = getattr(layer, "max_size", None)  # mlx-lm's RotatingKVCache, mlx-vlm's too
        if isinstance(layer, RowFullTailKVCache):
            window, arrays = layer.recent + SPARE, _arrays(layer.tail)
            per_token += sum(_one_position(a) for a in _arrays(layer.inner.state))
        one = sum(_one_position(a) for a in arrays)
        if window is None:
            per_token += one
        else:
            windows[window] = windows.get(window, 0) + one
    return KvFootprint(per_token, tuple(sorted(windows.items())), fixed)


def _arrays(state: Any) -> list[mx.array]:
    flat: dict[str, Any] = {}
    tree_flatten(state, destination=flat)
    arrays = [v for v in flat.values() if isinstance(v, mx.array)]
    mx.eval(arrays)
    return arrays


def _one_position(a: mx.array) -> int:
    """Bytes of one position of a (rows, heads, positions, last axis) cache array; the
    arrays are allocated in steps of positions, so the count comes from the shape."""
    if a.ndim < 3:
        return 0
    return a.nbytes // (a.shape[0] * a.shape[-2])
