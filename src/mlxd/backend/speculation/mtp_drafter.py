"""An MTP head's proposals for the rows that speculate with kind `mtp`, batched.

The head reads the target's pre-norm hidden state at position t and token t+1 and predicts
token t+2. Each step's target forward leaves, per row, the hidden states of the positions
its cache kept (`observe`); the next token after each is known when the row next drafts (the
context then holds them, `last` follows). So each proposal:

1. feeds every asking row the (hidden, next token) pairs of its positions not yet fed,
   right-padded to the longest, the padding rewound (as draft_model.py does): the head's own
   KV holds one entry per target position it saw, never a rejected draft's;
2. the head's output at each row's last pair gives the first draft; K-1 chained one-token
   steps (the head's own output hidden state with the previous draft) give the rest, and
   those chained entries are rewound at once.

The head is primed over the prompt: each prefill forward's hidden states (`prime`, from
mlx_lm/prefill_tap.py) are kept with the prompt tokens after them and fed to a single-row
head cache of their own when the row first drafts (it then joins the batch's head cache);
the last position's state waits for the first sampled token, so the first decode step
drafts already. A row the policy keeps parked pays for none of it: its priming is never run,
its hidden states are kept as references (no array op per step) and its answer keeps no
head state.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache, KVCache

from mlxd.backend.mlx_lm import verify_step as spec_compat

if TYPE_CHECKING:
    from mlxd.backend.mlx_lm.compat import PromptCache
    from mlxd.backend.speculation.drafts import DraftRequest
    from mlxd.backend.speculation.mtp_head import MtpHead

# Hidden states kept per row between its drafts beyond the last step's (older ones are
# dropped: a gap in its KV). Few: a parked row's first draft feeds them all, in the step
# whose cost tells the policy what verifying costs.
_MAX_PENDING = 8
# Prompt pairs a row's priming leaves uncomputed at most (mtp_drafter.prime).
_LAZY_PAIRS = 1024

# A hidden state not yet fed: an array (rows x positions x hidden, or positions x hidden) and
# where in it; sliced only when fed, so a parked row's step costs no array op.
Pending = tuple[mx.array, tuple[int, ...]]


def _vectors(pending: list[Pending]) -> list[mx.array]:
    return [states[at] for states, at in pending]


@dataclass(frozen=True, slots=True)
class HeadState:
    """A row's head state over the first `tokens` positions of its context, kept beside the
    target's prefix-cache snapshot (prefix.cache.SideState): the head's KV, one entry per
    (hidden, next token) pair fed, and the hidden states of the last positions, whose next
    tokens were not known yet (the last position's always)."""

    kv: KVCache | None
    pending: mx.array  # positions x hidden

    @property
    def tokens(self) -> int:
        return (self.kv.offset if self.kv is not None else 0) + int(self.pending.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.pending.nbytes) + (int(self.kv.nbytes) if self.kv is not None else 0)

    def cut(self, tokens: int) -> HeadState | None:
        """A copy over the first `tokens` positions. Cut inside the KV, the pair of the
        last kept position goes (its next token may differ now) and its hidden state, not
        kept, is left zero: the head then reads that position by its token alone."""
        kv = copy.deepcopy(self.kv)
        entries = kv.offset if kv is not None else 0
        if tokens > self.tokens or tokens <= 0:
            return None
        if tokens > entries:
            return HeadState(kv, self.pending[: tokens - entries])
        assert kv is not None  # tokens <= entries
        kv.trim(entries - tokens + 1)  # type: ignore[no-untyped-call]
        return HeadState(kv, mx.zeros_like(self.pending[:1]))


class MtpDrafter:
    """Greedy proposals of one MTP head for many rows (speculation.drafts.Drafts calls)."""

    def __init__(self, head: MtpHead, vocab_size: int) -> None:
        self.head = head
        self.vocab_size = vocab_size
        self._cache: PromptCache | None = None  # one row per uid of _uids
        self._uids: list[int] = []
        self._pending: dict[int, list[Pending]] = {}  # uid -> hidden states not yet fed
        self._primed: dict[int, PromptCache] = {}  # uid -> its head cache until it drafts
        # uid -> prompt (hidden states, next tokens) chunks not yet fed to _primed[uid]
        self._unfed: dict[int, list[tuple[mx.array, list[int]]]] = {}
        self._admitted = False  # rows joined the batch's head cache since take_admitted

    def start(self, uid: int) -> None:
        """A row of kind `mtp` joined: keep its hidden states from the next forward on."""
        self._pending.setdefault(uid, [])

    def observe(self, uids: list[int], hidden: object, kept: list[int]) -> None:
        """The target's forward over rows `uids`: each row keeps its first kept[i] positions
        of `hidden` (rows x positions x hidden, pre-norm)."""
        states = cast("mx.array", hidden)
        for i, (uid, n) in enumerate(zip(uids, kept, strict=True)):
            if uid in self._pending:
                rows = self._pending[uid]
                rows.extend((states, (i, j)) for j in range(n))
                del rows[: -max(_MAX_PENDING, n)]

    def prime(
        self, uids: list[int], hidden: mx.array, lengths: list[int], contexts: list[list[int]]
    ) -> None:
        """A prefill forward over rows `uids`: row i's first lengths[i] positions of `hidden`
        are the last ones of contexts[i] (what its cache holds now). Each row of kind `mtp`
        feeds its head cache every state whose next token is known; the last one waits."""
        for i, (uid, n) in enumerate(zip(uids, lengths, strict=True)):
            pending = self._pending.get(uid)
            if pending is None or n == 0 or uid in self._uids:
                continue
            chunk, after = hidden[i, :n], contexts[i][len(contexts[i]) - n - len(pending) + 1 :]
            unfed = self._unfed.setdefault(uid, [])
            if pending:  # their next tokens are known now
                unfed.append((mx.stack(_vectors(pending)), after[: len(pending)]))
            if n > 1:
                unfed.append((chunk[: n - 1], after[len(pending) :]))
            self._pending[uid] = [(chunk, (n - 1,))]
            # Fed when the row drafts (a row the policy parks never pays for it); past
            # _LAZY_PAIRS it is computed, so a long prompt does not hold its states.
            if sum(len(tokens) for _, tokens in unfed) >= _LAZY_PAIRS:
                cache = self._feed_prompt(uid)
                mx.eval([layer.state for layer in cache])  # type: ignore[attr-defined]

    def _feed_prompt(self, uid: int) -> PromptCache:
        """Row `uid`'s head cache until it drafts, fed the prompt chunks kept for it."""
        cache = self._primed.setdefault(uid, [BatchKVCache([0])])
        unfed = self._unfed.pop(uid, [])
        if unfed:
            states = mx.concatenate([h for h, _ in unfed]) if len(unfed) > 1 else unfed[0][0]
            tokens = mx.array([[t for _, after in unfed for t in after]], dtype=mx.uint32)
            self.head(states[None].astype(self.head.fc.weight.dtype), tokens, cache)
        return cache

    def take_admitted(self) -> bool:
        """Rows joined since the last call: the step computed their (lazy) priming too."""
        admitted, self._admitted = self._admitted, False
        return admitted

    def state(self, uid: int, tokens: int, ended: bool = False) -> HeadState | None:
        """A copy of the row's head state, if it covers exactly the first `tokens` positions
        of its context (its head was fed from the context's start on, without gaps).
        `ended`: the row's sequence is over; if it never drafted it keeps none (its priming
        would be computed for it: what a row the policy parked must not pay)."""
        pending = self._pending.get(uid)
        if not pending or (ended and uid not in self._uids):
            return None
        kv = None
        if uid in self._uids:
            assert self._cache is not None
            kv = self._cache[0].extract(self._uids.index(uid))  # type: ignore[attr-defined]
        elif uid in self._primed or self._unfed.get(uid):
            primed = self._feed_prompt(uid)[0]
            kv = primed.extract(0) if primed.keys is not None else None  # type: ignore[attr-defined]
        state = HeadState(cast("KVCache | None", kv), mx.stack(_vectors(pending)))
        if state.tokens != tokens:
            return None
        mx.eval(state.pending, *(state.kv.state if state.kv is not None else ()))
        return state

    def restore(self, uid: int, state: HeadState) -> None:
        """A row of kind `mtp` joined with a prefix-cache hit holding this head state over
        the positions it reuses: its head goes on from there."""
        self._pending[uid] = [(state.pending, (j,)) for j in range(state.pending.shape[0])]
        if state.kv is not None and state.kv.offset > 0:
            self._primed[uid] = spec_compat.batch_rows([[state.kv]])

    def propose(self, asks: list[DraftRequest]) -> list[list[int]]:
        """Per ask: its k greedy draft tokens (none for a row with no hidden state yet)."""
        new = [ask.uid for ask in asks if ask.uid not in self._uids]
        self._admitted = self._admitted or bool(new)
        self._admit(new)
        feeds = self._feeds(asks)
        if not any(feeds.values()):
            return [[] for _ in asks]
        hidden, logits = self._catch_up(feeds)
        steps = max(ask.k for ask in asks)
        tokens = [mx.argmax(logits, axis=-1).astype(mx.uint32)]
        for _ in range(steps - 1):
            hidden, logits = self._step(hidden[:, None, :], tokens[-1][:, None])
            tokens.append(mx.argmax(logits[:, -1, :], axis=-1).astype(mx.uint32))
            hidden = hidden[:, -1, :]
        drafted = mx.stack(tokens, axis=1)
        mx.eval(drafted)
        if steps > 1:
            assert self._cache is not None
            spec_compat.rewind_rows(self._cache, [steps - 1] * len(self._uids))
        rows = cast("list[list[int]]", drafted.tolist())
        where = {uid: i for i, uid in enumerate(self._uids)}
        return [rows[where[a.uid]][: a.k] if feeds.get(a.uid) else [] for a in asks]

    def discard(self, uid: int) -> None:
        """The row left the batch: drop its head cache."""
        self._pending.pop(uid, None)
        self._primed.pop(uid, None)
        self._unfed.pop(uid, None)
        if uid not in self._uids:
            return
        i = self._uids.index(uid)
        del self._uids[i]
        if not self._uids:
            self._cache = None
        elif self._cache is not None:
            spec_compat.keep_rows(self._cache, [j for j in range(len(self._uids) + 1) if j != i])

    def _admit(self, uids: list[int]) -> None:
        """New rows, appended to the batch: each with its primed head cache, or an empty one."""
        for uid in uids:
            self._uids.append(uid)
            self._feed_prompt(uid)  # primed over its prompt, else a new one
            row = self._primed.pop(uid)
            if self._cache is None:
                self._cache = row
            else:
                spec_compat.append_rows(self._cache, row)

    def _feeds(self, asks: list[DraftRequest]) -> dict[int, list[tuple[mx.array, int]]]:
        """Per asking row, its unfed (hidden, next token) pairs: its pending states are its
        context's last positions, the token after each is the next one (`last` at the end)."""
        feeds: dict[int, list[tuple[mx.array, int]]] = {}
        for ask in asks:
            states = _vectors(self._pending.get(ask.uid, []))
            self._pending[ask.uid] = []
            after = [*ask.context, ask.last][-len(states) :] if states else []
            feeds[ask.uid] = list(zip(states, after, strict=True))
        return feeds

    def _catch_up(self, feeds: dict[int, list[tuple[mx.array, int]]]) -> tuple[mx.array, mx.array]:
        """Feed every row its pairs (right-padded, the padding then rewound); the head's
        hidden state and logits at each row's last pair (rows x ...; a row fed nothing:
        garbage)."""
        rows = [feeds.get(uid, []) for uid in self._uids]
        width = max(len(pairs) for pairs in rows)
        size = self.head.fc.weight.shape[0]
        zero = mx.zeros((size,), dtype=self.head.fc.weight.dtype)
        hidden = mx.stack(
            [mx.stack([h for h, _ in pairs] + [zero] * (width - len(pairs))) for pairs in rows]
        )
        tokens = mx.array(
            [[t for _, t in pairs] + [0] * (width - len(pairs)) for pairs in rows],
            dtype=mx.uint32,
        )
        out, logits = self._step(hidden, tokens)
        assert self._cache is not None
        spec_compat.rewind_rows(self._cache, [width - len(pairs) for pairs in rows])
        at = mx.array([max(len(pairs), 1) - 1 for pairs in rows])
        last_hidden = mx.take_along_axis(out, at[:, None, None], axis=1)[:, 0, :]
        last_logits = mx.take_along_axis(logits, at[:, None, None], axis=1)[:, 0, :]
        return last_hidden, last_logits

    def _step(self, hidden: mx.array, tokens: mx.array) -> tuple[mx.array, mx.array]:
        assert self._cache is not None
        out, logits = self.head(hidden.astype(self.head.fc.weight.dtype), tokens, self._cache)
        return out, logits[..., : self.vocab_size]
