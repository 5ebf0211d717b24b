"""What the prefix cache sees of an image prompt, and whether a cache hit still leaves image
positions to prefill."""

from __future__ import annotations

from mlxd.types import ImageInputs

__all__ = ["cache_key", "needs_image_prefill"]

_HASH_BITS = 62  # a digest's share of a cache-key position (negative: never a token id)


def cache_key(prompt_ids: list[int], images: ImageInputs) -> list[int]:
    """The prompt as the prefix cache sees it: each image's positions (its image.tokens
    image-token positions in prompt order, in one run or several: tiles, rows) hold a number
    drawn from that image's digest (negative, so never a token id)."""
    marks = iter(_mark(image.digest) for image in images.images for _ in range(image.tokens))
    return [next(marks) if token == images.token_id else token for token in prompt_ids]


def _mark(digest: str) -> int:
    return -1 - (int(digest[:16], 16) & ((1 << _HASH_BITS) - 1))


def needs_image_prefill(prompt_ids: list[int], images: ImageInputs, cached: int) -> bool:
    """Some image position lies beyond the `cached` prompt tokens the prefix cache gave."""
    token = images.token_id
    return any(t == token for t in prompt_ids[cached:])
