"""Admission by KV bytes: what a request can grow to on its model, and the budget it must fit.

A request holds at most prompt + max_tokens positions; its model's `KvFootprint` (measured by
the backend at load, at the KV precision the server runs), plus its drafter's when its draft
kind keeps one per row (a draft model, a DFlash drafter, an MTP head), turns that into bytes.
The budget is MLXD_KV_BUDGET_BYTES, else MLXD_LOAD_MEMORY_FRACTION of the memory the process
could still use once the model was loaded (so it counts the weights, whatever else is running,
cgroup and rlimit limits). A request larger than the whole budget is refused at submit with
the numbers; one that fits waits in the queue until the running requests leave it room
(scheduler.py).
"""

from __future__ import annotations

from mlxd.config import setting_float
from mlxd.engine.loaded_models import ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind


def budget_bytes(configured: int, info: ModelInfo) -> int | None:
    """`configured` bytes when set (> 0), else the fraction of the memory left at load;
    None when neither is known (no byte budget: the token budget alone admits)."""
    if configured:
        return configured
    fraction = setting_float("load_memory_fraction")
    if info.kv_headroom is None or fraction <= 0:
        return None
    return int(fraction * info.kv_headroom)


def request_bytes(
    prompt: int,
    max_tokens: int,
    info: ModelInfo,
    budget: int | None,
    kind: DraftKind | None = None,
) -> int:
    """The KV bytes a request of `prompt` tokens generating up to `max_tokens`, drafting
    with `kind`, can hold; raises InvalidRequest, with the numbers, when that can never fit
    `budget`."""
    footprint = info.row_kv(kind)
    needed = footprint.bytes_for(prompt + max_tokens)
    if budget is not None and needed > budget:
        drafter = footprint.bytes_per_token - info.kv.bytes_per_token
        its = f", {drafter} of them its {kind} drafter's" if drafter and kind else ""
        raise InvalidRequest(
            f"this request can hold {needed} bytes of KV ({prompt} prompt + {max_tokens} new "
            f"tokens at {footprint.bytes_per_token} bytes per token{its}), more than the KV budget "
            f"of {budget} bytes (MLXD_KV_BUDGET_BYTES; a smaller max_tokens, or --kv-bits 8, "
            "may fit)",
            param="max_tokens",
        )
    return needed
