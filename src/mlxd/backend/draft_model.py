"""A draft model's proposals for the rows that speculate with kind `model`.

Each such row keeps its own KV cache of the draft model: per row, not one batch cache,
because rows join and leave the batch at any step and a batch cache mirroring the target's
would have to follow every extend and filter; a draft model is small, and the rows' forwards
are built lazily and evaluated together (one sync per step). A row's draft cache always
holds a prefix of the row's context: at its next draft, what it holds past the common prefix
with the context (the drafts the target rejected) is trimmed, and the tokens it lacks (the
whole prompt at the first draft, from token ids, never from the target's prefix cache; then
the accepted drafts and the target's next token) are fed in one forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend import mlx_lm_compat as compat
from mlxd.backend.speculative import DraftRequest
from mlxd.types import common_prefix_len

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module


@dataclass(slots=True)
class _RowCache:
    cache: compat.PromptCache
    tokens: list[int]  # exactly what `cache` holds


class DraftModel:
    """Greedy proposals of one draft model for many rows (backend.speculative.Drafts calls)."""

    def __init__(self, model: Module, vocab_size: int, prefill_chunk: int) -> None:
        self.model = model
        self.vocab_size = vocab_size  # the target's: the draft's logits are cut to it
        self.prefill_chunk = prefill_chunk
        self._rows: dict[int, _RowCache] = {}

    def propose(self, asks: list[DraftRequest]) -> list[tuple[list[int], mx.array]]:
        """Per ask: its k greedy draft tokens and the draft's log-probabilities at each drafted
        position (k x vocab, the draft distribution q a sampled acceptance rule needs)."""
        pending = [self._draft(ask) for ask in asks]
        mx.eval([t for tokens, _ in pending for t in tokens])
        out = []
        for ask, (tokens, logprobs) in zip(asks, pending, strict=True):
            drafted = cast("list[int]", mx.concatenate(tokens).tolist())
            self._rows[ask.uid].tokens += drafted[:-1]  # the last draft is never fed
            out.append((drafted, mx.concatenate(logprobs, axis=0)))
        return out

    def discard(self, uid: int) -> None:
        self._rows.pop(uid, None)

    def _draft(self, ask: DraftRequest) -> tuple[list[mx.array], list[mx.array]]:
        """The lazy graph of one row's k drafts and their log-probabilities."""
        logits = self._catch_up(ask.uid, [*ask.context, ask.last])
        row = self._rows[ask.uid]
        tokens: list[mx.array] = []
        logprobs: list[mx.array] = []
        for i in range(ask.k):
            if i:
                logits = self._forward(tokens[-1].reshape(1, 1), row.cache)
            lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            tokens.append(mx.argmax(lp, axis=-1))
            logprobs.append(lp)
        return tokens, logprobs

    def _catch_up(self, uid: int, sequence: list[int]) -> mx.array:
        """Make the row's cache hold `sequence` but its last token, then feed that one too;
        returns the logits after it (1 x vocab)."""
        row = self._rows.get(uid)
        if row is None:
            row = self._rows[uid] = _RowCache(make_prompt_cache(self.model), [])
        keep = min(common_prefix_len(row.tokens, sequence), len(sequence) - 1)
        if keep < len(row.tokens):
            compat.trim_cache(row.cache, len(row.tokens) - keep)
            del row.tokens[keep:]
        missing = sequence[keep:]
        while len(missing) > self.prefill_chunk:
            chunk, missing = missing[: self.prefill_chunk], missing[self.prefill_chunk :]
            self._forward(mx.array([chunk], dtype=mx.uint32), row.cache)
            mx.eval([c.state for c in row.cache])  # type: ignore[attr-defined]
            row.tokens += chunk
        row.tokens += missing
        return self._forward(mx.array([missing], dtype=mx.uint32), row.cache)

    def _forward(self, inputs: mx.array, cache: compat.PromptCache) -> mx.array:
        logits: mx.array = self.model(inputs, cache=cache)[:, -1, :]
        return logits[:, : self.vocab_size] if logits.shape[-1] > self.vocab_size else logits
