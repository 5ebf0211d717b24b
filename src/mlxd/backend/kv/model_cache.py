"""Which cache a model's sequences start with: full precision, or quantized attention KV.

mlx-lm builds every cache of a model with `make_prompt_cache(model)`, which defers to the
model's `make_cache()` when it has one (BatchGenerator for each new sequence, and mlxd's
prefix cache, vision prefill and speculation checks). `quantize_kv` gives the loaded model a
`make_cache` that returns the model's own layers with each plain attention `KVCache` replaced
by a `RowQuantizedKVCache` (a `RowFullTailKVCache` when recent positions stay full
precision): sliding-window (rotating) and recurrent layers keep theirs, since a
window is bounded already and a recurrent state has no token axis. Batches merged from such
rows are `BatchQuantizedKVCache`s, so the whole path stays quantized.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, make_prompt_cache

from mlxd.backend.kv.attention import install as install_attention
from mlxd.backend.kv.full_tail import RowFullTailKVCache
from mlxd.backend.kv.quantized_batch import RowQuantizedKVCache
from mlxd.config import KV_BITS, KV_GROUP_SIZES, KV_KEY_BITS
from mlxd.errors import InvalidRequest

_PLAIN = "_mlxd_plain_make_cache"  # the model's own cache maker, kept once replaced


def quantize_kv(model: Any, bits: int, group_size: int, recent: int = 0, key_bits: int = 0) -> None:
    """From now on the model's plain attention layers cache keys and values quantized to
    `bits` in groups of `group_size` (the keys to `key_bits` when set, 16: 16-bit levels), each
    sequence's last `recent` positions also in full precision (bits 0: full precision
    again). Raises InvalidRequest when a layer's head dimension is not a multiple of the
    group size."""
    plain = _plain_maker(model)
    if not bits:
        if _PLAIN in vars(model):
            object.__setattr__(model, "make_cache", plain)
        return
    if bits not in KV_BITS or group_size not in KV_GROUP_SIZES or key_bits not in (0, *KV_KEY_BITS):
        raise InvalidRequest(
            f"kv bits must be one of {KV_BITS}, key bits 0 or one of {KV_KEY_BITS} and the "
            f"group size one of {KV_GROUP_SIZES} (got {bits} bits, keys {key_bits}, group "
            f"{group_size})",
            param="kv_bits",
        )
    _check_head_dims(model, plain, group_size)
    install_attention()

    def make_cache() -> list[Any]:
        return [_quantized(layer, bits, group_size, recent, key_bits) for layer in plain()]

    object.__setattr__(model, "make_cache", make_cache)


def kv_quantization(model: Any) -> tuple[int, int] | None:
    """(bits, group size) of the model's quantized attention layers, or None."""
    for layer in make_prompt_cache(model):
        if isinstance(layer, RowQuantizedKVCache):
            return int(layer.bits), int(layer.group_size)
        if isinstance(layer, RowFullTailKVCache):
            return layer.kv_bits, layer.group_size
    return None


def _plain_maker(model: Any) -> Callable[[], list[Any]]:
    """The model's own cache maker (mlx-lm's default when it has none), kept on the model."""
    kept = vars(model).get(_PLAIN)
    if kept is not None:
        return kept  # type: ignore[no-any-return]
    own = getattr(model, "make_cache", None)
    if callable(own):
        maker: Callable[[], list[Any]] = own
    else:

        def maker() -> list[Any]:
            return [KVCache() for _ in model.layers]  # type: ignore[no-untyped-call]

    object.__setattr__(model, _PLAIN, maker)
    return maker


def _quantized(layer: Any, bits: int, group_size: int, recent: int, key_bits: int) -> Any:
    if type(layer) is not KVCache:
        return layer
    if recent:
        return RowFullTailKVCache(group_size, bits, recent, key_bits)
    return RowQuantizedKVCache(group_size, bits, key_bits)


def _check_head_dims(model: Any, plain: Callable[[], list[Any]], group_size: int) -> None:
    """One token through a fresh full-precision cache shows each attention layer's key and
    value widths, which must split into whole groups."""
    cache = plain()
    model(mx.array([[0]]), cache=cache)
    for i, layer in enumerate(cache):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if type(layer) is not KVCache or keys is None or values is None:
            continue
        dims = (keys.shape[-1], values.shape[-1])
        if any(d % group_size for d in dims):
            raise InvalidRequest(
                f"quantized KV: layer {i}'s head dimension {dims[0]} is not a multiple of the "
                f"group size {group_size} (try --kv-group-size 32, or full precision)",
                param="kv_group_size",
            )
