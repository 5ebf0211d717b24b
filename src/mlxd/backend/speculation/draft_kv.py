"""The KV bytes a row's drafter holds beside the target's, measured from the drafter's caches.

A row that speculates with a draft model keeps that model's KV of its context; one with an MTP
head the head's one attention layer's; one with a DFlash drafter each drafter layer's KV of
its context positions. Each is measured as the target's is (backend.kv.footprint): one
position through a fresh cache of the drafter, at the precision the drafter runs (its caches
are not quantized: `--kv-bits` quantizes the target's). Admission (engine.kv_budget) adds the
one a row's draft kind uses to the target's.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlxd.backend.api import KvFootprint, LoadedModel
from mlxd.backend.kv import cache_footprint, kv_footprint


def drafter_footprint(loaded: LoadedModel) -> KvFootprint:
    """The KvFootprint of the drafter attached as `draft` (a draft model) or `dflash`
    (a DFlash drafter); empty without one."""
    if loaded.draft is not None:
        return kv_footprint(loaded.draft.model)
    if loaded.dflash is not None:
        return dflash_footprint(loaded.dflash)
    return KvFootprint()


def mtp_footprint(head: Any) -> KvFootprint:
    """One position (zeros) through the MTP head's decoder layer, on the plain KV cache its
    drafter keeps per row (speculation.mtp_drafter); the head itself does not run."""
    norm = head.pre_fc_norm_hidden.weight
    cache = [KVCache()]  # type: ignore[no-untyped-call]
    head.layers[0](mx.zeros((1, 1, norm.shape[0]), dtype=norm.dtype), None, cache[0])
    return cache_footprint(cache)


def dflash_footprint(drafter: Any) -> KvFootprint:
    """One context position (the tapped target states, zeros) fed to a fresh cache of the
    drafter, as speculation.dflash_drafter feeds a row's context: a one-mask block."""
    config = drafter.config
    width = len(config.target_layer_ids) * int(config.hidden_size)
    cache = drafter.make_cache()
    block = mx.array([[int(config.mask_token_id)]], dtype=mx.uint32)
    drafter(block, mx.zeros((1, 1, width), dtype=drafter.hidden_norm.weight.dtype), cache)
    return cache_footprint(cache)
