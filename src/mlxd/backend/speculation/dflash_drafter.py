"""A DFlash drafter's proposals for the rows that speculate with kind `dflash`.

The drafter (mlx-vlm's DFlashDraftModel, speculation.dflash_load) reads, per row, the
target's hidden states after its `target_layer_ids` layers at the positions the target's
cache holds (its context), and drafts a block per forward: the row's next token followed by
K mask tokens, all attending to one another and to the context, gives K draft tokens at once.

Per row it keeps its own KV cache of context positions and the hidden states the target's
forwards left since its last draft (`observe`: only the positions each row kept, so a
rejected draft never reaches the drafter and nothing needs rewinding). Each proposal feeds a
row's pending states as new context (appended to its cache) with the block; the block's own
keys are never cached (mlx-vlm's attention); more than _MAX_PENDING pending states are fed
at once, without a draft, or, while the policy parks, all but the last _PARKED_PENDING are
dropped (a gap in the drafter's context: a parked row pays for no drafter forward). A
decode step's states stay references to the tapped layers' outputs until they are read (no
array op per step). The prefill's forwards prime it (`prime`): the prompt's states are
pending then, so its first decode step drafts already. A prefix-cache snapshot of a row
keeps its drafter state (`state`, DflashState) and a hit restores it (`restore`), so a next
turn drafts over its whole context, as a cold prefill gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import mlx.core as mx

from mlxd.backend.mlx_lm.layer_tap import LayerTap
from mlxd.backend.speculation.dflash_batch import batchable, draft_logits

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module

    from mlxd.backend.speculation.drafts import DraftRequest


@dataclass(frozen=True, slots=True)
class DflashState:
    """A row's drafter state over the first `tokens` positions of its context, kept beside
    the target's prefix-cache snapshot (prefix.cache.SideState): its per-layer context KV
    (None: nothing fed yet) and the states still pending (1 x positions x n*hidden)."""

    kv: list[Any] | None  # mlx-vlm's KVCache per drafter layer
    pending: mx.array | None

    @property
    def tokens(self) -> int:
        fed = self.kv[0].offset if self.kv else 0
        return fed + (int(self.pending.shape[1]) if self.pending is not None else 0)

    @property
    def nbytes(self) -> int:
        kv = sum(int(c.nbytes) for c in self.kv or ())
        return kv + (int(self.pending.nbytes) if self.pending is not None else 0)

    def cut(self, tokens: int) -> DflashState | None:
        """A copy over the first `tokens` positions (None: it covers fewer)."""
        if tokens > self.tokens or tokens <= 0:
            return None
        fed = self.kv[0].offset if self.kv else 0
        if tokens >= fed:
            rest = self.pending[:, : tokens - fed] if self.pending is not None else None
            return DflashState(_copied(self.kv, fed), rest if tokens > fed else None)
        return DflashState(_copied(self.kv, tokens), None)


def _copied(kv: list[Any] | None, positions: int) -> list[Any] | None:
    """Fresh caches holding the first `positions` entries of `kv` (the arrays are shared:
    a cache's next update allocates anew, since it is full)."""
    if not kv or positions <= 0:
        return None
    copies = []
    for layer in kv:
        keys, values = layer.state
        fresh = type(layer)()  # mlx-vlm's KVCache, as the drafter's make_cache gives
        fresh.keys, fresh.values = keys[:, :, :positions], values[:, :, :positions]
        fresh.offset = positions
        copies.append(fresh)
    return copies


# Context positions a row keeps pending between its drafts; more are fed to its cache at once
# (a long prompt, steps where the policy verified no draft).
_MAX_PENDING = 64
# Entries a row keeps while the policy parks (older ones are dropped): few, as the MTP head
# keeps, since the first draft after a park feeds them all, in the verify step whose time
# tells the policy what verifying costs (64 made that step cost twice a drafting one).
_PARKED_PENDING = 8


@dataclass(frozen=True, slots=True)
class _Step:
    """Row `row`'s first `n` positions of one forward's tapped layer outputs, unsliced."""

    outputs: tuple[mx.array, ...]
    row: int
    n: int

    def array(self) -> mx.array:
        r = self.row
        return mx.concatenate([o[r : r + 1, : self.n] for o in self.outputs], axis=-1)


Pending = mx.array | _Step  # 1 x positions x n*hidden, or a step's states not read yet


def _positions(p: Pending) -> int:
    return p.n if isinstance(p, _Step) else int(p.shape[1])


def _joined(pending: list[Pending]) -> mx.array:
    arrays = [p.array() if isinstance(p, _Step) else p for p in pending]
    return arrays[0] if len(arrays) == 1 else mx.concatenate(arrays, axis=1)


class DflashDrafter:
    """Greedy block proposals of one DFlash drafter for many rows (Drafts calls)."""

    def __init__(self, drafter: Module, target: Module, vocab_size: int) -> None:
        self.drafter: Any = drafter  # mlx-vlm's class is untyped
        self.vocab_size = vocab_size
        config = self.drafter.config
        self.mask_token = int(config.mask_token_id)
        self.block_size = int(config.block_size)  # the block it was trained on: K + 1 at most
        tap = LayerTap.on(target, list(config.target_layer_ids))
        if tap is None:  # dflash_load checked the layer ids against the target's config
            raise ValueError("the target's decoder layers cannot be tapped")
        self.tap = tap
        self._batched = batchable(self.drafter)
        self._caches: dict[int, list[Any]] = {}  # uid -> the drafter's KV cache of its context
        self._pending: dict[int, list[Pending]] = {}  # uid -> context states not yet fed

    def start(self, uid: int) -> None:
        """A row of kind `dflash` joined: keep its hidden states from the next forward on."""
        self._pending.setdefault(uid, [])

    def observe(self, uids: list[int], kept: list[int], parking: bool = False) -> None:
        """The target's forward over rows `uids` just ran: each row keeps the tapped states
        of its first kept[i] positions. `parking`: the policy verifies no drafts now (past
        _MAX_PENDING the oldest states are dropped, not fed)."""
        outputs = self.tap.outputs()
        self.tap.forget_seen()  # only the last forward's states matter here
        if outputs is None:
            return
        for i, (uid, n) in enumerate(zip(uids, kept, strict=True)):
            rows = self._pending.get(uid)
            if rows is not None and n > 0:
                self._stash(uid, rows, _Step(outputs, i, n), parking)

    def prime(
        self, uids: list[int], shape: tuple[int, ...], lengths: list[int], parking: bool = False
    ) -> None:
        """The prefill's forwards over rows `uids` just ran (their final states are `shape`,
        rows x positions): row i's first lengths[i] positions are the last ones its cache
        holds. Each row of kind `dflash` keeps them pending (`parking`: observe)."""
        seen = self.tap.take_seen()
        states = seen[0] if len(seen) == 1 else mx.concatenate(seen, axis=1) if seen else None
        if states is None or tuple(states.shape[:2]) != tuple(shape[:2]):
            return  # not the forwards the prefill saw: the row drafts from its decode steps
        for i, (uid, n) in enumerate(zip(uids, lengths, strict=True)):
            pending = self._pending.get(uid)
            if pending is not None and n > 0:
                self._stash(uid, pending, states[i : i + 1, :n], parking)

    def _stash(
        self, uid: int, pending: list[Pending], states: Pending, parking: bool = False
    ) -> None:
        pending.append(states)
        if parking:  # drop the oldest entries (a step's are one position: no sum each step)
            if len(pending) > _PARKED_PENDING:
                del pending[: len(pending) - _PARKED_PENDING]
            return
        if sum(_positions(p) for p in pending) > _MAX_PENDING:
            self._feed(uid, pending)

    def _feed(self, uid: int, pending: list[Pending]) -> None:
        """Feed the row's pending states but the last to its cache (a one-mask block whose
        output is not read: mlx-vlm's drafter feeds context only with a block)."""
        context = _joined(pending)
        if context.shape[1] > 1:
            cache = self._cache(uid)
            block = mx.array([[self.mask_token]], dtype=mx.uint32)
            self.drafter(block, context[:, :-1], cache)
            mx.eval([c.state for c in cache])
        pending[:] = [context[:, -1:]]

    def propose(self, asks: list[DraftRequest]) -> list[list[int]]:
        """Per ask: up to k greedy draft tokens (none for a row with no context yet). The
        asking rows draft in one forward (speculation.dflash_batch), or one row per forward
        for a drafter that path does not take."""
        ready = [a for a in asks if self._pending.get(a.uid) and min(a.k, self.block_size - 1)]
        drafts: dict[int, mx.array] = {}
        if len(ready) > 1 and self._batched:
            drafts = self._draft_batch(ready)
        else:
            for ask in ready:
                drafts[ask.uid] = self._draft(ask)
        mx.eval(list(drafts.values()))
        return [cast("list[int]", drafts[a.uid].tolist()) if a.uid in drafts else [] for a in asks]

    def _draft_batch(self, asks: list[DraftRequest]) -> dict[int, mx.array]:
        width = max(min(a.k, self.block_size - 1) for a in asks)
        blocks = mx.array([[a.last] + [self.mask_token] * width for a in asks], dtype=mx.uint32)
        contexts = [self._context(a.uid) for a in asks]
        caches = [self._cache(a.uid) for a in asks]
        logits = draft_logits(self.drafter, blocks, contexts, caches)
        tokens = mx.argmax(logits[:, 1:, : self.vocab_size], axis=-1)
        return {a.uid: tokens[i, : min(a.k, self.block_size - 1)] for i, a in enumerate(asks)}

    def state(self, uid: int, tokens: int) -> DflashState | None:
        """A copy of the row's drafter state, if it covers exactly the first `tokens`
        positions of its context (it saw them all, from the context's start)."""
        pending = self._pending.get(uid)
        if pending is None:
            return None
        rest = None
        if pending:
            rest = _joined(pending)
        kv = self._caches.get(uid)
        state = DflashState(_copied(kv, kv[0].offset) if kv else None, rest)
        if state.tokens != tokens:
            return None
        mx.eval([c.state for c in state.kv or ()], *([rest] if rest is not None else []))
        return state

    def restore(self, uid: int, state: DflashState) -> None:
        """A row of kind `dflash` joined with a prefix-cache hit holding this state over the
        positions it reuses: its drafter goes on from there."""
        kv = _copied(state.kv, state.kv[0].offset) if state.kv else None
        if kv is not None:
            self._caches[uid] = kv
        self._pending[uid] = [state.pending] if state.pending is not None else []

    def discard(self, uid: int) -> None:
        """The row left the batch: drop its cache and pending states."""
        self._caches.pop(uid, None)
        self._pending.pop(uid, None)

    def _draft(self, ask: DraftRequest) -> mx.array:
        k = min(ask.k, self.block_size - 1)
        context = self._context(ask.uid)
        cache = self._cache(ask.uid)
        block = mx.array([[ask.last] + [self.mask_token] * k], dtype=mx.uint32)
        logits = self.drafter(block, context, cache)[0, 1:, : self.vocab_size]
        return mx.argmax(logits, axis=-1)

    def _context(self, uid: int) -> mx.array:
        """The row's pending states (some), taken."""
        pending, self._pending[uid] = self._pending[uid], []
        return _joined(pending)

    def _cache(self, uid: int) -> list[Any]:
        cache = self._caches.get(uid)
        if cache is None:
            cache = self._caches[uid] = self.drafter.make_cache()
        return cache
