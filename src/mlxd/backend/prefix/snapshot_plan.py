"""Where one batch's sequences copy their caches into the prefix cache.

A prompt is inserted in segments that end at its snapshot points (end of the system prompt,
start of the last message, where the next turn departs, all but the last token): a prefill
chunk never crosses a segment end and mlx-lm's BatchGenerator reports each one, so the runner
copies the cache there (mlx-lm's server does the same for its system and user segments).
The runner asks this module at insert, at each segment end, and when a sequence ends or is
removed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlx_lm.models.cache import make_prompt_cache

from mlxd.backend.prefix.cache import MIN_REUSE_TOKENS, SnapshotKind, Turn, trimmable_at
from mlxd.types import PromptBoundaries

if TYPE_CHECKING:
    from mlx.nn.layers.base import Module


@dataclass(slots=True)
class SnapshotPlan:
    """One sequence's snapshot points still ahead (prompt position, kind; None: a segment end
    that is not kept), and whether its final cache (prompt + answer) is kept. `key` is the
    prompt as the prefix cache sees it (an image prompt's runs carry the image digests)."""

    prompt: list[int]
    key: list[int]
    turn: Turn
    points: deque[tuple[int, SnapshotKind | None]]
    answer: bool

    def keyed(self, tokens: list[int] | None) -> list[int] | None:
        """`tokens` (the prompt, then generated ones) as the prefix cache keys them."""
        if tokens is None or self.key is self.prompt:
            return tokens
        return self.key[: len(tokens)] + tokens[len(self.key) :]

    def segments(self, cached: int) -> list[list[int]]:
        """The prompt after the cached tokens, cut at each point."""
        ends = [at for at, _ in self.points] + [len(self.prompt)]
        starts = [cached, *ends[:-1]]
        return [self.prompt[a:b] for a, b in zip(starts, ends, strict=True)]

    def kind_at_end(self, tokens: list[int]) -> SnapshotKind:
        """What a cache holding `tokens` is when its sequence leaves early (removed)."""
        return SnapshotKind.PROMPT if len(tokens) < len(self.prompt) else SnapshotKind.ANSWER


def plan_snapshots(
    prompt: list[int],
    key: list[int],
    boundaries: PromptBoundaries,
    turn: Turn,
    cached: int,
    always_trimmable: bool,
) -> SnapshotPlan:
    """Where this prompt's cache is copied. BatchGenerator always ends a segment before the
    last prompt token; the other ends are the chat layer's boundaries. A cache that can
    always be cut back to any prefix (`always_trimmable`: plain attention) needs no
    mid-prompt snapshots: its answer's serves every shorter prompt."""
    last, system = len(prompt) - 1, boundaries.system
    kinds: dict[int, SnapshotKind | None] = {last: None}
    if not always_trimmable:
        for point in (boundaries.history, boundaries.next_turn):
            if abs(point - system) >= MIN_REUSE_TOKENS:  # else the system one serves
                kinds[min(point, last)] = SnapshotKind.HISTORY
        kinds[last] = SnapshotKind.PROMPT
    kinds[system] = SnapshotKind.SYSTEM
    points = deque(
        (at, kind)
        for at, kind in sorted(kinds.items())
        if cached < at <= last and (at == last or at >= MIN_REUSE_TOKENS)
    )
    answer = always_trimmable or turn.next_turn >= len(prompt)
    return SnapshotPlan(prompt, key, turn, points, answer)


class SnapshotPlans:
    """The plans of one batch's sequences, by uid. `cuts_anywhere`: the model's cache can be
    cut back to any prefix of what it holds (plain attention), so its answer's snapshot serves
    every shorter prompt and it needs no mid-prompt ones."""

    def __init__(self, cuts_anywhere: bool) -> None:
        self._plans: dict[int, SnapshotPlan] = {}
        self.cuts_anywhere = cuts_anywhere

    @classmethod
    def for_model(cls, model: Module) -> SnapshotPlans:
        return cls(trimmable_at(make_prompt_cache(model), 1 << 62))

    def plan(
        self,
        prompt: list[int],
        key: list[int],
        boundaries: PromptBoundaries,
        turn: Turn,
        cached: int,
    ) -> SnapshotPlan:
        """Where this prompt's cache will be copied (`plan_snapshots`); `add` keeps it."""
        return plan_snapshots(prompt, key, boundaries, turn, cached, self.cuts_anywhere)

    def __bool__(self) -> bool:
        return bool(self._plans)

    def add(self, uid: int, plan: SnapshotPlan) -> None:
        self._plans[uid] = plan

    def pop(self, uid: int) -> SnapshotPlan | None:
        return self._plans.pop(uid, None)

    def segments_done(self, uids: list[int]) -> list[tuple[int, SnapshotKind, SnapshotPlan]]:
        """These sequences' caches now end at their next point: (uid, kind, plan) of the
        ones to copy."""
        keep = []
        for uid in uids:
            plan = self._plans.get(uid)
            if plan is not None and plan.points:
                _, kind = plan.points.popleft()
                if kind is not None:
                    keep.append((uid, kind, plan))
        return keep

    def coming(self, prompt_ids: list[int]) -> int:
        """The most of `prompt_ids` a snapshot still ahead in this batch will hold."""
        coming = 0
        for plan in self._plans.values():
            for at, kind in plan.points:
                if kind is not None and at > coming and prompt_ids[:at] == plan.key[:at]:
                    coming = at
        return coming

    def worth_waiting(self, prompt_ids: list[int], reusable: int) -> bool:
        """A snapshot still ahead will hold enough more of `prompt_ids` than the `reusable`
        tokens the prefix cache gives now that starting it after that store saves a prefill."""
        coming = self.coming(prompt_ids) if self._plans else 0
        return coming >= MIN_REUSE_TOKENS and coming - reusable >= MIN_REUSE_TOKENS
