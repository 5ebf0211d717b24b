"""DRY ("don't repeat yourself", p-e-w 2024; llama.cpp's `--dry-*`): penalize the tokens that
would extend a repetition of the recent context.

If the context ends with tokens that also occurred earlier, followed there by token x, then x
would extend a repeated run of length L. When L >= allowed_length, x's logit loses
multiplier * base ** (L - allowed_length), the largest such penalty over every earlier
occurrence. A sequence breaker (a token of "\\n", ":", ...) is never part of a run, and is
never penalized itself: a repetition that reaches one is over.
"""

from __future__ import annotations

from collections.abc import Iterable

import mlx.core as mx
import numpy as np

from mlxd.types import SamplingParams, Tokenizer

MAX_MATCH = 64  # longest run measured: its penalty already dwarfs any logit (1.75**62 ~ 1e15)


class DryPenalty:
    """One request's DRY processor (logits processor protocol: context tokens, logits [1, V])."""

    __slots__ = ("_multiplier", "_base", "_allowed", "_last_n", "_breakers")

    def __init__(self, params: SamplingParams, breakers: Iterable[int]) -> None:
        self._multiplier = params.dry_multiplier
        self._base = params.dry_base
        self._allowed = params.dry_allowed_length
        self._last_n = params.dry_penalty_last_n  # -1: the whole context
        self._breakers = np.array(sorted(set(breakers)), dtype=np.int64)

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        context = np.array(tokens, dtype=np.int64)
        if self._last_n > 0:
            context = context[-self._last_n :]
        ids, lengths = repeat_lengths(context, self._breakers)
        keep = lengths >= self._allowed
        if not keep.any():
            return logits
        excess = (lengths[keep] - self._allowed).astype(np.float64)
        penalty = self._multiplier * np.power(self._base, excess)
        at = mx.array(ids[keep].astype(np.int32))
        return logits.at[:, at].subtract(mx.array(penalty.astype(np.float32)))


def repeat_lengths(context: np.ndarray, breakers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, run lengths): for each token that would extend a repetition of the end of
    `context`, the longest such run (capped at MAX_MATCH), breakers excluded."""
    n = len(context)
    if n < 2:
        return _none()
    is_breaker = np.isin(context, breakers)
    if is_breaker[-1]:
        return _none()
    # A run may not reach back past the last breaker of the context.
    found = np.flatnonzero(is_breaker)
    reach = n - 1 - int(found[-1]) if len(found) else n
    ends = np.flatnonzero(context[:-1] == context[-1])  # earlier copies of the last token
    ends = ends[~is_breaker[ends + 1]]  # the token that followed each: not a breaker
    if not len(ends):
        return _none()
    lengths = np.ones(len(ends), dtype=np.int64)
    alive = np.ones(len(ends), dtype=bool)
    for k in range(1, min(reach, MAX_MATCH)):
        at = ends - k
        alive &= at >= 0
        alive[alive] = context[at[alive]] == context[n - 1 - k]
        if not alive.any():
            break
        lengths += alive
    following = context[ends + 1]
    order = np.lexsort((-lengths, following))  # per token, its longest run first
    following, lengths = following[order], lengths[order]
    first = np.ones(len(following), dtype=bool)
    first[1:] = following[1:] != following[:-1]
    return following[first], lengths[first]


def _none() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)


def breaker_ids(tokenizer: Tokenizer, breakers: Iterable[str]) -> set[int]:
    """The token ids that break a run: each breaker's last token, as text-generation-webui's
    DRY takes them (llama.cpp matches multi-token breakers by text; one token covers the
    defaults on every BPE vocabulary we know)."""
    out: set[int] = set()
    for text in breakers:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if ids:
            out.add(ids[-1])
    return out
