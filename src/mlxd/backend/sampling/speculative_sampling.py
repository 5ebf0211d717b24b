"""The speculative-sampling accept/resample rule, which keeps a sampled row's output
distribution exactly its target's (Leviathan et al. 2023; Chen et al. 2023).

For the draft token x at position j, drawn with probability q_j(x), where the row's sampler
would draw from p_j: accept it with probability min(1, p_j(x) / q_j(x)); at the first
rejection draw the next token from normalize(max(0, p_j - q_j)); when all K drafts are
accepted, draw it from p_K. Deterministic drafts (prompt lookup) have a one-hot q: x is
accepted with probability p_j(x), and a rejection draws from p_j without x.

Pure functions over arrays with any leading batch dimensions: the uniforms come in as an
argument and the caller draws the next token, so each row keeps its own PRNG key.
"""

from __future__ import annotations

import mlx.core as mx


def one_hot(draft: mx.array, vocab: int) -> mx.array:
    """q for deterministic drafts: [..., K] token ids -> [..., K, vocab] float32."""
    return (draft[..., None] == mx.arange(vocab)).astype(mx.float32)


def accepted_count(p: mx.array, q: mx.array, draft: mx.array, u: mx.array) -> mx.array:
    """How many leading drafts are accepted, [...] int32. `p` [..., K+1, V] is the target
    distribution at each verified position, `q` [..., K, V] the draft's, `draft` [..., K] the
    drafted ids, `u` [..., K] uniforms in [0, 1)."""
    k = draft.shape[-1]
    at = draft[..., None].astype(mx.int32)
    px = mx.take_along_axis(p[..., :k, :], at, axis=-1)[..., 0]
    qx = mx.take_along_axis(q, at, axis=-1)[..., 0]
    accept = u * qx < px  # u < p/q without the division: q(x) = 0 < p(x) accepts
    return mx.cumprod(accept.astype(mx.int32), axis=-1).sum(axis=-1)


def next_distribution(p: mx.array, q: mx.array, n: mx.array) -> mx.array:
    """What the token after `n` accepted drafts is drawn from, [..., V]: the residual
    normalize(max(0, p_n - q_n)) after a rejection (n < K), p_K after none."""
    zero = mx.zeros((*q.shape[:-2], 1, q.shape[-1]), dtype=q.dtype)
    residual = mx.maximum(p - mx.concatenate([q, zero], axis=-2), 0.0)
    at = n[..., None, None].astype(mx.int32)
    row = mx.take_along_axis(residual, at, axis=-2)[..., 0, :]
    total = row.sum(axis=-1, keepdims=True)
    # A residual of zero mass means p_n == q_n (rounding aside): then p_n itself is exact.
    fallback = mx.take_along_axis(p, at, axis=-2)[..., 0, :]
    return mx.where(total > 0, row / mx.maximum(total, 1e-30), fallback)
