"""Speculative decoding policy: which rows draft, what they propose, how much is accepted.

Each decode step a speculating row proposes up to K draft tokens; the target model verifies
every row of the batch in one forward pass over [last token, drafts..., padding] (a row
without a draft verifies its one token); each row keeps the drafts its own sampler agrees
with plus the target's token after them, and its KV cache is rewound by what it rejected
(mlx_lm.verify_step.rewind_rows). The step itself is verify_step.SpeculativeGenerationBatch:
this module holds the decisions, that one the mlx-lm state. Rows of kind `model` get their
drafts from speculation.draft_model (one draft model per batch, a draft cache per row).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from mlxd.backend.api import DraftCount
from mlxd.backend.speculation.draft_policy import Acceptance, DraftPolicy
from mlxd.types import DraftKind

if TYPE_CHECKING:
    import mlx.core as mx

    from mlxd.backend.speculation.dflash_drafter import DflashDrafter, DflashState
    from mlxd.backend.speculation.mtp_drafter import HeadState, MtpDrafter

# Prompt lookup matches the last MAX_NGRAM..MIN_NGRAM tokens, longest first: a one-token
# match drafts too often on a CPU, where every drafted position costs a forward position.
MAX_NGRAM = 4
MIN_NGRAM = 2
# While the policy parks the same rows (none of them prompt lookup), it is asked again only
# every REPARK steps: the rule costs ~25 us a step over 8 rows, a few % of a small model's
# step, and a parked batch's costs and records change slowly. A row joining or leaving, or a
# row that must verify, asks it at once.
REPARK = 4


class NgramIndex:
    """Prompt lookup for one sequence: for each n-gram (MIN..MAX_NGRAM tokens) of the text
    seen so far, where its latest occurrence ends. Indexed incrementally as tokens arrive.
    `_heads` holds each indexed n-gram's first n-1 tokens: whether a draft is possible at all
    is known from the tokens before the current one (`may_propose`), which are on the host
    while the current one is still being computed."""

    __slots__ = ("_ends", "_heads", "_seen")

    def __init__(self) -> None:
        self._ends: dict[tuple[int, ...], int] = {}
        self._heads: set[tuple[int, ...]] = set()
        self._seen = 0

    def may_propose(self, tokens: list[int]) -> bool:
        """Whether `propose(tokens, last, k)` can return a draft for some `last`: an indexed
        n-gram starts with the last n-1 of `tokens`. False means it returns none, exactly."""
        self._index(tokens)
        heads = self._heads
        for n in range(MIN_NGRAM, min(MAX_NGRAM, len(tokens)) + 1):
            if tuple(tokens[len(tokens) - n + 1 :]) in heads:
                return True
        return False

    def propose(self, tokens: list[int], last: int, k: int) -> list[int]:
        """Up to `k` tokens following the latest earlier match of the end of tokens + [last]
        (`tokens` only grows between calls)."""
        self._index(tokens)
        context_len = len(tokens) + 1
        for n in range(min(MAX_NGRAM, context_len - 1), MIN_NGRAM - 1, -1):
            key = (*tokens[len(tokens) - n + 1 :], last)
            end = self._ends.get(key)
            if end is not None:
                follow = tokens[end : end + k]
                if len(follow) < k and end + len(follow) == len(tokens):
                    follow.append(last)  # the match runs into the current position
                return follow[:k]
        return []

    def _index(self, tokens: list[int]) -> None:
        ends, heads = self._ends, self._heads
        for end in range(max(self._seen, 1), len(tokens) + 1):
            for n in range(MIN_NGRAM, min(MAX_NGRAM, end) + 1):
                gram = tuple(tokens[end - n : end])
                ends[gram] = end
                heads.add(gram[:-1])
        self._seen = len(tokens)


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """One row's ask of the draft model: `context` is what the target's cache holds, `last`
    the row's next token (not in the cache yet), `k` how many draft tokens to propose."""

    uid: int
    context: list[int]
    last: int
    k: int


class ModelDrafter(Protocol):
    """A drafter asked after the width is chosen: a draft model (draft_model.DraftModel), an
    MTP head (mtp_drafter.MtpDrafter) or a DFlash drafter (dflash_drafter.DflashDrafter)."""

    def propose(self, asks: list[DraftRequest]) -> list[list[int]]: ...

    def discard(self, uid: int) -> None: ...


@dataclass(slots=True)
class _Row:
    k: int
    index: NgramIndex | None  # None: `kind`'s drafter proposes
    kind: DraftKind = DraftKind.NGRAM
    fixed: bool = False  # verifies its whole draft at every step (a seeded sampled row)
    odds: Acceptance = field(default_factory=Acceptance)


@dataclass(slots=True)
class Drafts:
    """The speculating rows of one batch (by uid) and their draft/accept counts."""

    model: ModelDrafter | None = None  # proposes for the rows of kind `model`
    mtp: MtpDrafter | None = None  # proposes for the rows of kind `mtp`
    dflash: DflashDrafter | None = None  # proposes for the rows of kind `dflash`
    policy: DraftPolicy = field(default_factory=DraftPolicy)  # how wide each step verifies
    rows: dict[int, _Row] = field(default_factory=dict)
    counts: dict[int, DraftCount] = field(default_factory=dict)  # since the last take_counts
    parked: int = 0  # steps where rows offered drafts and the policy verified none
    parking: bool = False  # the last step where rows offered drafts verified none
    pooled: dict[DraftKind, Acceptance] = field(default_factory=dict)  # every row's, by kind
    _kinds: str = ""  # the drafters the step being chosen asks (StepCosts measures per set)
    # Of the steps where only prompt lookup offered and the sampled tokens were read, how
    # many found a draft the policy verified (`parks`: reading costs a sync where none does).
    looks: Acceptance = field(default_factory=Acceptance)
    _looking: bool = False  # this step's tokens are read for prompt lookup alone
    _parked_rows: tuple[int, ...] = ()  # the rows the policy parked last, and for how many
    _parked_for: int = 0  # more steps that answer holds (REPARK)

    def add(self, uid: int, kind: DraftKind, k: int, fixed: bool = False) -> None:
        """A speculating row; `fixed`: its drafts are verified whatever the policy says (a
        seeded sampled row's tokens depend on which drafts are verified, and a seed repeats)."""
        self._parked_for = 0  # a changed row asks the policy at the next step
        odds = self.pooled.setdefault(kind, Acceptance()).joined()
        if k > 0 and kind is DraftKind.NGRAM:
            self.rows[uid] = _Row(k, NgramIndex(), DraftKind.NGRAM, fixed, odds)
        elif k > 0 and self._drafter(kind) is not None:
            self.rows[uid] = _Row(k, None, kind, fixed, odds)
            if kind is DraftKind.MTP and self.mtp is not None:
                self.mtp.start(uid)
            if kind is DraftKind.DFLASH and self.dflash is not None:
                self.dflash.start(uid)

    def discard(self, uid: int) -> None:
        self._parked_for = 0
        row = self.rows.pop(uid, None)
        drafter = self._drafter(row.kind) if row is not None else None
        if drafter is not None:
            drafter.discard(uid)

    def observe(self, uids: list[int], hidden: object, kept: list[int]) -> None:
        """The step's forward over rows `uids` gave these pre-norm hidden states (rows x
        positions x hidden), of which each row's first `kept[i]` positions stay."""
        if self.mtp is not None:
            self.mtp.observe(uids, hidden, kept)
        if self.dflash is not None:
            self.dflash.observe(uids, kept, self.parking)  # its own layers' states (LayerTap)

    def prime(
        self, uids: list[int], hidden: object, lengths: list[int], contexts: list[list[int]]
    ) -> None:
        """A prefill forward over rows `uids` gave these hidden states (mtp_drafter.prime)."""
        if self.mtp is not None:
            self.mtp.prime(uids, cast("mx.array", hidden), lengths, contexts)
        if self.dflash is not None:  # it reads its own layers' states (LayerTap)
            self.dflash.prime(uids, cast("mx.array", hidden).shape, lengths, self.parking)

    def head_state(
        self, uid: int, tokens: int, ended: bool = False
    ) -> HeadState | DflashState | None:
        """Row `uid`'s MTP head state (or DFlash drafter state, for a row of that kind) over
        the first `tokens` positions, if it has one; `ended`: its sequence is over (an MTP
        row that never drafted then keeps none: mtp_drafter.MtpDrafter.state). None while
        the policy parks: the state costs a head forward over the prompt (MTP) or a copy of
        the target's states (DFlash), which parked rows must not pay; a row reusing that
        prefix starts its drafter after it."""
        if self.parking:
            return None
        row = self.rows.get(uid)
        if self.dflash is not None and row is not None and row.kind is DraftKind.DFLASH:
            return self.dflash.state(uid, tokens)
        return self.mtp.state(uid, tokens, ended) if self.mtp is not None else None

    def restore(self, uid: int, state: object) -> None:
        """Row `uid` reuses a prefix whose snapshot kept this MTP head or DFlash state (a
        state of the other kind is left: the row's drafter starts after the prefix)."""
        from mlxd.backend.speculation.dflash_drafter import DflashState

        row = self.rows.get(uid)
        dflash = isinstance(state, DflashState)
        if self.mtp is not None and row is not None and row.kind is DraftKind.MTP and not dflash:
            self.mtp.restore(uid, cast("HeadState", state))
        if self.dflash is not None and row is not None and row.kind is DraftKind.DFLASH and dflash:
            self.dflash.restore(uid, cast("DflashState", state))

    def _drafter(self, kind: DraftKind) -> ModelDrafter | None:
        drafters = {
            DraftKind.MODEL: self.model,
            DraftKind.MTP: self.mtp,
            DraftKind.DFLASH: self.dflash,
        }
        return drafters.get(kind)

    def propose(
        self, uids: list[int], contexts: list[list[int]], last: list[int], room: list[int]
    ) -> list[list[int]]:
        """Each row's draft (maybe empty), as long as the policy's width for this step at
        most: `contexts` are the tokens in its cache, `last` its next token (sampled, not yet
        in the cache), `room` how many more it may emit after that one. Prompt lookup drafts
        before the choice (it is cheap), the draft model after it, only when the step
        verifies."""
        rows = self.rows
        drafts: list[list[int]] = [[] for _ in uids]
        offers: list[tuple[int, _Row, int]] = []  # (position, row, draft length on offer)
        for i, (uid, tokens, token, left) in enumerate(
            zip(uids, contexts, last, room, strict=True)
        ):
            row = rows.get(uid)
            k = min(row.k, left) if row is not None else 0
            if row is None or k <= 0:
                continue
            if row.index is not None:
                drafts[i] = row.index.propose(tokens, token, k)
                k = len(drafts[i])
            if k:
                offers.append((i, row, k))
        most = max((k for _, _, k in offers), default=0)
        least = max((k for _, row, k in offers if row.fixed), default=0)
        chances = [(row.odds, k) for _, row, k in offers]
        self._kinds = _drafters([row for _, row, _ in offers])
        width = self.policy.width(len(uids), chances, most, least, self._kinds)
        asks: dict[DraftKind, list[tuple[int, DraftRequest]]] = {}
        self.parked += bool(offers) and width == 0
        if offers:
            self.parking = width == 0
        for i, row, k in offers:
            if width == 0:
                row.odds.idle()
                drafts[i] = []
            elif row.index is None:
                ask = DraftRequest(uids[i], contexts[i], last[i], min(k, width))
                asks.setdefault(row.kind, []).append((i, ask))
            else:
                drafts[i] = drafts[i][:width]
        for kind, kind_asks in asks.items():
            drafter = self._drafter(kind)
            assert drafter is not None  # add() keeps only rows whose drafter exists
            proposed = drafter.propose([ask for _, ask in kind_asks])
            for (i, _), draft in zip(kind_asks, proposed, strict=True):
                drafts[i] = draft
        return drafts

    def parks(self, uids: list[int], room: list[int], contexts: list[list[int]]) -> bool:
        """Whether this step is plain whatever the rows would draft: no prompt-lookup row
        can draft (NgramIndex.may_propose, from `contexts`: the tokens in each row's cache)
        and the policy verifies no width even if every other speculating row offered its
        longest draft (and none must verify its own). Such a step is counted as `propose`
        would count it, without drafting: mlx-lm's plain step then runs as without
        speculation (its next forward queued behind this one, no sync to read the sampled
        tokens, which on a small model costs more than the drafts it rarely finds)."""
        if self._parked_for > 0 and tuple(uids) == self._parked_rows:
            self._parked_for -= 1
            for uid in uids:
                self.rows[uid].odds.idle()
            self.parked += 1
            return True
        self._parked_for = 0
        offers = [
            (row, min(row.k, left))
            for uid, left, tokens in zip(uids, room, contexts, strict=True)
            if (row := self.rows.get(uid)) is not None
            and min(row.k, left) > 0
            and (row.index is None or row.index.may_propose(tokens))
        ]
        if any(row.fixed for row, _ in offers):
            return False
        most = max((k for _, k in offers), default=0)
        kinds = self._kinds = _drafters([row for row, _ in offers])
        chances = [(row.odds, k) for row, k in offers]
        width = self.policy.width(len(uids), chances, most, 0, kinds) if offers else 0
        if width and kinds:
            return False
        if width and self._worth_looking(len(uids), chances, width):
            self._looking = True  # the tokens are read for prompt lookup alone (`started`)
            return False
        if width:  # not worth a sync: the lookup's record relaxes as a row's does
            self.looks.idle()
        for row, _ in offers:
            row.odds.idle()
        self.parked += bool(offers)
        self.parking |= bool(offers)
        rows = self.rows
        repeat = all(
            (row := rows.get(uid)) is not None and row.index is None and not row.fixed
            for uid in uids
        )
        if offers and repeat:
            self._parked_rows, self._parked_for = tuple(uids), REPARK - 1
        return True

    def _worth_looking(self, rows: int, chances: list[tuple[Acceptance, int]], width: int) -> bool:
        """Whether reading the sampled tokens pays where only prompt lookup offers: with
        chance h (`looks`) a draft is found and the step of this width gives its score S
        tokens per plain step's time over r plain steps, else a plain step costs 1 + c (the
        sync, StepCosts.look_cost): look iff h r (S - rows) > (1 - h) rows c."""
        costs, h = self.policy.costs, self.looks.p
        ratio = costs.ratio(rows, width, "")
        score = self.policy.score(rows, chances, width, "")
        return h * ratio * (score - rows) > (1.0 - h) * rows * costs.look_cost(rows)

    def idle(self) -> bool:
        """No row speculates: the step is mlx-lm's own, untimed (the next timed step starts
        a new sample rather than closing one across the untimed ones)."""
        if self.rows:
            return False
        self.policy.costs.pause()
        return True

    def started(self, rows: int, width: int, at: float | None = None) -> None:
        """A step over `rows` rows verifying `width` drafts per row (0: plain) started at
        `at` (perf_counter; None: now), its drafting included: a draft model's or an MTP
        head's forwards are part of what a verify step costs (measured per drafter set)."""
        at = time.perf_counter() if at is None else at
        looked, self._looking = self._looking, False
        if looked:
            self.looks.observe(1, int(width > 0))
        self.policy.costs.started(rows, width, at, self._kinds, looked and not width)
        if self.mtp is not None and self.mtp.take_admitted():
            self.policy.costs.spoil()  # it also computed the new rows' priming: no sample

    def record(self, uid: int, drafted: int, accepted: int) -> None:
        if drafted:
            row = self.rows.get(uid)
            if row is not None:
                row.odds.observe(drafted, accepted)
                self.pooled.setdefault(row.kind, Acceptance()).observe(drafted, accepted)
            seen = self.counts.get(uid)
            if seen is not None:
                drafted, accepted = seen.drafted + drafted, seen.accepted + accepted
            self.counts[uid] = DraftCount(drafted, accepted)

    @staticmethod
    def accepted_length(targets: list[int], draft: list[int]) -> int:
        """Greedy verification: how many leading draft tokens equal the target's choices."""
        n = 0
        for target, proposed in zip(targets, draft, strict=False):
            if target != proposed:
                break
            n += 1
        return n

    def take_parked(self) -> int:
        parked, self.parked = self.parked, 0
        return parked

    def take_counts(self) -> dict[int, DraftCount]:
        counts, self.counts = self.counts, {}
        return counts


def _drafters(rows: list[_Row]) -> str:
    """The drafters a verify step over these offering rows asks: "" (prompt lookup only),
    "model", "mtp" or "model+mtp"."""
    return "+".join(sorted({row.kind.value for row in rows if row.index is None}))
