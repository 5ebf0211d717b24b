"""A snapshot file's bytes to a prompt cache, checked against the model before any batch sees it.

The file format is mlx-lm's `save_prompt_cache`: safetensors whose arrays are the flattened
`[layer.state for layer in cache]` (keys `<layer>.<path>`), and whose metadata holds the
caller's metadata (`0.<key>`), each layer's class name (`1.<layer>`) and which leaves were
scalars or None (`2.<n>.0` the leaf, `2.<n>.1` its kind). A file is parsed from the
bytes its digest was checked on, never from its path again, and its flat keys are compared
with the ones the model's own cache would save before anything is rebuilt from them.

`CacheShape.probe(model)` runs one token through a fresh cache of the model: what each layer's
class and arrays (dtype, rank, every size but the token axis) are. `read_snapshot` refuses a
file whose layers, classes, arrays, fixed sizes (a sliding window's) or lengths (the tokens it
claims to hold) differ: a cache that would fail inside a batched step fails here instead, and
is a cache miss for its request alone.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import cache as mlx_cache

from mlxd.backend.kv import RowQuantizedKVCache
from mlxd.backend.mlx_lm.compat import PromptCache

_CLASSES: dict[str, Any] = {
    name: getattr(mlx_cache, name)
    for name in ("KVCache", "RotatingKVCache", "QuantizedKVCache", "ChunkedKVCache", "ArraysCache")
}
_CLASSES["RowQuantizedKVCache"] = RowQuantizedKVCache  # quantized KV (backend.kv)
CACHE_CLASSES = frozenset(_CLASSES)  # the layer classes a snapshot file may name
_UNTIMED = frozenset({"ArraysCache"})  # recurrent states: no token axis, fixed sizes
_FIXED = (
    "keep",
    "max_size",
    "group_size",
    "bits",
    "key_bits",
    "chunk_size",
)  # set by the model's config
_KINDS = {int: "scalar", float: "scalar", bool: "scalar", type(None): "none"}


class BadSnapshot(ValueError):
    """The file is not a cache of this model holding the tokens it claims (the reason)."""


@dataclass(frozen=True, slots=True)
class Leaf:
    """One leaf of a layer's state: an array (dtype, shape; None at the token axis), a
    scalar or None (`kind`)."""

    kind: str
    dtype: str = ""
    shape: tuple[int | None, ...] = ()


@dataclass(frozen=True, slots=True)
class CacheShape:
    """What every cache of one model looks like: each layer's class, its leaves by flat key,
    and the sizes its config fixes."""

    classes: tuple[str, ...]
    leaves: dict[str, Leaf]
    fixed: tuple[dict[str, int], ...]

    @classmethod
    def probe(cls, model: Any) -> CacheShape:
        """Run one token through a fresh cache of `model` (on the engine thread)."""
        cache = mlx_cache.make_prompt_cache(model)
        model(mx.array([[0]]), cache=cache)
        states = [layer.state for layer in cache]
        mx.eval(states)
        classes = tuple(type(layer).__name__ for layer in cache)
        leaves = {}
        for key, value in _flat(states).items():
            timed = classes[int(key.split(".")[0])] not in _UNTIMED
            leaves[key] = _leaf(value, timed)
        fixed = tuple(_fixed_sizes(layer) for layer in cache)
        return cls(classes, leaves, fixed)


def read_snapshot(
    data: bytes, tokens: int, shape: CacheShape
) -> tuple[PromptCache, dict[str, str]]:
    """The cache in `data` and its caller metadata, if it is a cache of `shape`'s model
    holding exactly `tokens` tokens; raises BadSnapshot otherwise."""
    try:
        arrays, meta = mx.load(io.BytesIO(data), format="safetensors", return_metadata=True)
    except Exception as e:  # noqa: BLE001 - mlx raises plain runtime errors on bad files
        raise BadSnapshot(f"not a safetensors file ({e})") from e
    assert isinstance(arrays, dict) and isinstance(meta, dict)
    classes = {k: v for k, v in meta.items() if k.startswith("1.")}
    if classes != {f"1.{i}": name for i, name in enumerate(shape.classes)}:
        raise BadSnapshot(f"its {len(classes)} layer classes are not the model's")
    kinds = _scalar_kinds(meta)
    if set(arrays) != set(shape.leaves):
        raise BadSnapshot("its arrays are not the ones this model's cache holds")
    leaves: list[tuple[str, Any]] = []
    for key, expected in shape.leaves.items():
        leaves.append((key, _checked_leaf(key, arrays[key], kinds.get(key, "array"), expected)))
    states = tree_unflatten(leaves)
    cache = [_CLASSES[c].from_state(s) for c, s in zip(shape.classes, states, strict=True)]
    for i, layer in enumerate(cache):
        _check_lengths(i, layer, tokens, shape.fixed[i])
    return cache, {k[2:]: v for k, v in meta.items() if k.startswith("0.")}


def _leaf(value: object, timed: bool) -> Leaf:
    if not isinstance(value, mx.array):
        return Leaf(_KINDS.get(type(value), "unknown"))
    dims: list[int | None] = list(value.shape)
    if timed and len(dims) >= 2:
        dims[-2] = None
    return Leaf("array", str(value.dtype), tuple(dims))


def _fixed_sizes(layer: object) -> dict[str, int]:
    return {
        name: getattr(layer, name) for name in _FIXED if isinstance(getattr(layer, name, None), int)
    }


def _scalar_kinds(meta: dict[str, str]) -> dict[str, str]:
    """Leaf key -> "scalar" | "none" (what a file says), from the `2.<n>.0` / `2.<n>.1` pairs."""
    kinds = {}
    for key, leaf in meta.items():
        if key.startswith("2.") and key.endswith(".0"):
            kinds[leaf] = meta.get(key[:-2] + ".1", "")
    return kinds


def _checked_leaf(key: str, array: mx.array, kind: str, expected: Leaf) -> object:
    if expected.kind != "array":
        if kind != expected.kind:
            raise BadSnapshot(f"leaf {key} is a {kind}, the model's is a {expected.kind}")
        if kind == "none":
            return None
        if kind == "scalar" and array.size == 1:
            return array.item()
        raise BadSnapshot(f"leaf {key} is not a {expected.kind}")
    shape = tuple(array.shape)
    same = len(shape) == len(expected.shape) and all(
        want is None or got == want for got, want in zip(shape, expected.shape, strict=True)
    )
    if kind != "array" or str(array.dtype) != expected.dtype or not same:
        raise BadSnapshot(
            f"array {key} is {array.dtype}{list(shape)}, the model's cache holds "
            f"{expected.dtype}{['T' if d is None else d for d in expected.shape]}"
        )
    return array


def _check_lengths(i: int, layer: Any, tokens: int, fixed: dict[str, int]) -> None:
    """The layer holds `tokens` tokens, its fixed sizes are the model's, and its arrays are
    long enough for what it says it holds."""
    for name, want in fixed.items():
        if getattr(layer, name, None) != want:
            raise BadSnapshot(f"layer {i} has {name} {getattr(layer, name, None)}, not {want}")
    offset = getattr(layer, "offset", tokens)
    if offset != tokens:
        raise BadSnapshot(f"layer {i} holds {offset} tokens, its file claims {tokens}")
    if type(layer).__name__ in _UNTIMED:
        return
    held = min(offset, fixed.get("max_size", offset))
    lengths = {a.shape[-2] for a in _arrays(layer.state)}
    if len(lengths) > 1 or any(n < held for n in lengths):
        raise BadSnapshot(f"layer {i}'s arrays hold {sorted(lengths)} positions, not {held}")
    index = getattr(layer, "_idx", None)
    if isinstance(index, int) and not 0 <= index <= min(lengths, default=0):
        raise BadSnapshot(f"layer {i}'s write position {index} is outside its arrays")


def _arrays(state: object) -> list[mx.array]:
    return [v for v in _flat(state).values() if isinstance(v, mx.array)]


def _flat(tree: object) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    tree_flatten(tree, destination=flat)
    return flat
