"""Hidden states of a padded batch to one vector per row (sentence-transformers' pooling modes)."""

from __future__ import annotations

import mlx.core as mx

POOLINGS = ("cls", "mean", "max", "last")


def pool(hidden: mx.array, mask: mx.array, lengths: list[int], mode: str) -> mx.array:
    """(rows, tokens, dims) with `mask` (rows, tokens; 1 on real tokens) -> (rows, dims).
    Rows are right-padded, so a row's last token is at its length - 1."""
    if mode == "cls":
        return hidden[:, 0]
    if mode == "last":
        return hidden[mx.arange(len(lengths)), mx.array([n - 1 for n in lengths])]
    weights = mask[..., None].astype(hidden.dtype)
    if mode == "mean":
        return (hidden * weights).sum(axis=1) / mx.maximum(weights.sum(axis=1), 1e-9)
    if mode == "max":
        return mx.where(weights > 0, hidden, mx.array(-mx.inf, hidden.dtype)).max(axis=1)
    raise ValueError(f"unknown pooling {mode!r} (one of {', '.join(POOLINGS)})")


def normalized(vectors: mx.array) -> mx.array:
    """Each row scaled to unit length (a zero row stays zero)."""
    norms = mx.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / mx.maximum(norms, 1e-12)
