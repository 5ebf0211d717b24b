"""A draft model's proposals for the rows that speculate with kind `model`, batched.

The draft keeps one batch KV cache whose rows follow the drafting rows (by uid; a row joins
at its first draft and leaves when it finishes or is cancelled). A row's draft cache always
holds a prefix of the row's context (the tokens in the target's cache) plus, maybe, tokens
the target did not keep. Each step:

1. a new row's prompt is prefilled alone, from token ids (never from the target's prefix
   cache), and appended to the batch;
2. each row is rewound to its common prefix with context + [next token] (what the target
   rejected leaves, per row, as the target's own cache does: mlx_lm.verify_step.rewind_rows);
3. one forward feeds each row what it lacks (the accepted drafts and the next token),
   right-padded to the longest, and the padding is rewound; its last real position gives
   the first draft;
4. K-1 one-token forwards for all rows give the others (a row asking fewer than the most
   drafts, or none, is fed too: its cache holds what it was fed, and step 2 trims it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.mlx_lm import compat
from mlxd.backend.mlx_lm import verify_step as spec_compat
from mlxd.backend.speculation.dflash_drafter import DflashDrafter
from mlxd.backend.speculation.drafts import DraftRequest, Drafts
from mlxd.backend.speculation.mtp_drafter import MtpDrafter
from mlxd.types import common_prefix_len

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.api import LoadedModel
    from mlxd.backend.speculation.mtp_head import MtpHead


def batch_drafts(loaded: LoadedModel, vocab_size: int, prefill_chunk: int) -> Drafts:
    """One batch's speculation: prompt lookup for rows of kind `ngram`, the draft model's
    proposals (when `loaded` has one) for rows of kind `model`, its MTP head's for `mtp`,
    its DFlash drafter's for `dflash`."""
    draft = loaded.draft
    model = DraftModel(draft.model, vocab_size, prefill_chunk) if draft is not None else None
    head = cast("MtpHead | None", loaded.mtp)
    mtp = MtpDrafter(head, vocab_size) if head is not None else None
    dflash = loaded.dflash
    block = DflashDrafter(dflash, loaded.model, vocab_size) if dflash is not None else None
    return Drafts(model, mtp, dflash=block)


class DraftModel:
    """Greedy proposals of one draft model for many rows (speculation.drafts.Drafts calls)."""

    def __init__(self, model: Module, vocab_size: int, prefill_chunk: int) -> None:
        self.model = model
        self.vocab_size = vocab_size  # the target's: the draft's logits are cut to it
        self.prefill_chunk = prefill_chunk
        self._cache: compat.PromptCache | None = None  # one row per uid of _uids
        self._uids: list[int] = []
        self._held: list[list[int]] = []  # per row: exactly the tokens its cache holds

    def propose(self, asks: list[DraftRequest]) -> list[list[int]]:
        """Per ask: its k greedy draft tokens."""
        self._admit([ask for ask in asks if ask.uid not in self._uids])
        feeds = self._rewind(asks)
        logits = self._catch_up(feeds)
        steps = max(ask.k for ask in asks)
        tokens: list[mx.array] = []
        for j in range(steps):
            if j:
                logits = self._forward(tokens[-1][:, None])
            tokens.append(mx.argmax(logits, axis=-1).astype(mx.uint32))
        drafted = mx.stack(tokens, axis=1)  # rows x steps
        mx.eval(drafted)
        rows = cast("list[list[int]]", drafted.tolist())
        for held, row in zip(self._held, rows, strict=True):
            held += row[:-1]  # every row was fed all but the last draft
        where = {uid: i for i, uid in enumerate(self._uids)}
        return [rows[where[ask.uid]][: ask.k] for ask in asks]

    def discard(self, uid: int) -> None:
        """The row left the batch: drop its draft cache."""
        if uid not in self._uids:
            return
        i = self._uids.index(uid)
        del self._uids[i], self._held[i]
        if not self._uids:
            self._cache = None
        elif self._cache is not None:
            spec_compat.keep_rows(self._cache, [j for j in range(len(self._uids) + 1) if j != i])

    def _admit(self, asks: list[DraftRequest]) -> None:
        """Prefill each new row's context alone, then append the rows to the batch."""
        if not asks:
            return
        caches = []
        for ask in asks:
            cache = make_prompt_cache(self.model)
            for start in range(0, len(ask.context), self.prefill_chunk):
                chunk = ask.context[start : start + self.prefill_chunk]
                self.model(mx.array([chunk], dtype=mx.uint32), cache=cache)
                mx.eval([c.state for c in cache])
            caches.append(cache)
            self._uids.append(ask.uid)
            self._held.append(list(ask.context))
        rows = spec_compat.batch_rows(caches)
        if self._cache is None:
            self._cache = rows
        else:
            spec_compat.append_rows(self._cache, rows)

    def _rewind(self, asks: list[DraftRequest]) -> list[list[int]]:
        """Rewind each row to its common prefix with its context + next token (keeping at
        least that last token to feed); returns what each row must be fed (rows not asking
        this step: nothing)."""
        wanted = {ask.uid: [*ask.context, ask.last] for ask in asks}
        rejected: list[int] = []
        feeds: list[list[int]] = []
        for uid, held in zip(self._uids, self._held, strict=True):
            sequence = wanted.get(uid)
            keep = len(held)
            if sequence is not None:
                keep = min(common_prefix_len(held, sequence), len(sequence) - 1)
            rejected.append(len(held) - keep)
            del held[keep:]
            feeds.append(sequence[keep:] if sequence is not None else [])
        if any(rejected):
            assert self._cache is not None
            spec_compat.rewind_rows(self._cache, rejected)
        return feeds

    def _catch_up(self, feeds: list[list[int]]) -> mx.array:
        """Feed every row its tokens (right-padded, the padding then rewound); returns the
        logits at each row's last fed position (rows x vocab; a row fed nothing: garbage)."""
        width = max(len(feed) for feed in feeds)
        inputs = mx.array([feed + [0] * (width - len(feed)) for feed in feeds], dtype=mx.uint32)
        logits = self._forward(inputs, last=False)
        assert self._cache is not None
        spec_compat.rewind_rows(self._cache, [width - len(feed) for feed in feeds])
        for held, feed in zip(self._held, feeds, strict=True):
            held += feed
        at = mx.array([max(len(feed), 1) - 1 for feed in feeds])
        return mx.take_along_axis(logits, at[:, None, None], axis=1)[:, 0, :]

    def _forward(self, inputs: mx.array, *, last: bool = True) -> mx.array:
        logits: mx.array = self.model(inputs, cache=self._cache)
        if last:
            logits = logits[:, -1, :]
        return logits[..., : self.vocab_size] if logits.shape[-1] > self.vocab_size else logits
