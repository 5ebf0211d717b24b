"""Seeded draws without PRNG state: counter-based uniforms and an inverse-CDF categorical draw.

A sampled request's k-th draw uses the uniform hash(seed, k, lane) (a SplitMix64 finalizer,
computed in Python: one number per row and step, no key to split), then picks the token where
that uniform falls in the row's cumulative distribution. Every operation is row-wise, so a row
gives the same token alone or in any batch, and a whole batch draws in one array expression
(MLX has no batched keyed draw: `mx.random` takes one key per call).
"""

from __future__ import annotations

import mlx.core as mx

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
UNIFORM_BITS = 23  # u * total < total in float32 for every u <= 1 - 2**-23 (see inverse_cdf)
_SCALE = 1.0 / (1 << UNIFORM_BITS)
LANES = 1 << 16  # uniforms per draw index: a draw uses lane 0, a verify lanes 1..K too


def _mix(z: int) -> int:
    """SplitMix64's finalizer: a bijection of 64-bit integers that scatters every input bit."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def stream_key(seed: int) -> int:
    """The 64-bit key of a seed's stream of uniforms (computed once per request)."""
    return _mix((seed ^ 0x5DEECE66D) & _MASK)


def uniform(key: int, index: int, lane: int = 0) -> float:
    """The uniform in [0, 1) of draw `index`, lane `lane`, of the stream `key`: a multiple of
    2**-23, exact in float32. Draws of one stream never repeat a (index, lane) pair."""
    z = _mix((key + (index * LANES + lane + 1) * _GOLDEN) & _MASK)
    return (z >> (64 - UNIFORM_BITS)) * _SCALE


def inverse_cdf(weights: mx.array, u: mx.array) -> mx.array:
    """One token per row from non-negative `weights` [..., V] that sum to about 1 (a
    softmax): the first index whose cumulative weight exceeds u * total, `u` [..., 1] in
    [0, 1). A token of zero weight is never drawn: u * total < total in float32 (u has 23
    bits), and equal cumulative sums never bracket a threshold."""
    cdf = mx.cumsum(weights, axis=-1)
    return mx.argmax(cdf > u * cdf[..., -1:], axis=-1)  # the first True, as uint32


def tempered_draw(logits: mx.array, inv_temp: mx.array | float, u: mx.array) -> mx.array:
    """A draw from softmax(logits * inv_temp) per row; `inv_temp` a float or [..., 1]."""
    return inverse_cdf(mx.softmax(logits.astype(mx.float32) * inv_temp, axis=-1), u)
