"""What the prefix cache sees of an image prompt, and whether a cache hit still leaves image
positions to prefill."""

from __future__ import annotations

from mlxd.types import ImageInputs

__all__ = ["cache_key", "needs_image_prefill"]

_HASH_BITS = 62  # a digest's share of a cache-key position (negative: never a token id)


def cache_key(prompt_ids: list[int], images: ImageInputs) -> list[int]:
    """The prompt as the prefix cache sees it: each image's run of positions holds a number
    drawn from that image's digest (negative, so never a token id)."""
    runs = iter(images.images)
    key: list[int] = []
    mark = 0
    previous = -1
    for token in prompt_ids:
        if token == images.token_id and previous != images.token_id:
            digest = next(runs).digest
            mark = -1 - (int(digest[:16], 16) & ((1 << _HASH_BITS) - 1))
        key.append(mark if token == images.token_id else token)
        previous = token
    return key


def needs_image_prefill(prompt_ids: list[int], images: ImageInputs, cached: int) -> bool:
    """Some image position lies beyond the `cached` prompt tokens the prefix cache gave."""
    token = images.token_id
    return any(t == token for t in prompt_ids[cached:])
