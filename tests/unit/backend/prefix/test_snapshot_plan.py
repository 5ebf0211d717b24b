"""Where a sequence's cache is copied: the points a prompt is cut at, and what a batch has
coming (pure Python, no model)."""

from __future__ import annotations

from mlxd.backend.prefix.cache import MIN_REUSE_TOKENS, SnapshotKind, Turn
from mlxd.backend.prefix.snapshot_plan import SnapshotPlans, plan_snapshots
from mlxd.types import PromptBoundaries

PROMPT = list(range(100))
CHAT = PromptBoundaries(system=20, history=60, next_turn=80)


def test_a_chat_prompt_is_cut_at_its_boundaries_and_before_its_last_token() -> None:
    plan = plan_snapshots(PROMPT, PROMPT, CHAT, Turn(PROMPT, 80), 0, always_trimmable=False)
    assert list(plan.points) == [
        (20, SnapshotKind.SYSTEM),
        (60, SnapshotKind.HISTORY),
        (80, SnapshotKind.HISTORY),
        (99, SnapshotKind.PROMPT),
    ]
    assert [len(s) for s in plan.segments(0)] == [20, 40, 20, 19, 1]
    assert not plan.answer  # the next turn departs inside this prompt


def test_a_trimmable_cache_keeps_the_system_point_and_its_answer_only() -> None:
    plan = plan_snapshots(PROMPT, PROMPT, CHAT, Turn(PROMPT, 100), 0, always_trimmable=True)
    assert list(plan.points) == [(20, SnapshotKind.SYSTEM), (99, None)]
    assert plan.answer


def test_cached_tokens_and_short_prefixes_make_no_points() -> None:
    plan = plan_snapshots(PROMPT, PROMPT, CHAT, Turn(PROMPT, 80), 60, always_trimmable=False)
    assert [at for at, _ in plan.points] == [80, 99]
    tiny = PromptBoundaries(system=MIN_REUSE_TOKENS - 1)
    plan = plan_snapshots(PROMPT, PROMPT, tiny, Turn(PROMPT, 0), 0, always_trimmable=True)
    assert [at for at, _ in plan.points] == [99]


def test_the_batch_says_what_is_coming_and_hands_out_kept_points() -> None:
    plans = SnapshotPlans(cuts_anywhere=False)
    assert not plans and not plans.worth_waiting(PROMPT, 0)
    plans.add(7, plans.plan(PROMPT, PROMPT, CHAT, Turn(PROMPT, 80), 0))
    assert plans.coming(PROMPT[:70] + [999] * 30) == 60  # shares the history point, not more
    assert plans.coming([999] * 100) == 0
    assert plans.worth_waiting(PROMPT, 0) and not plans.worth_waiting(PROMPT, 99 - 10)
    (uid, kind, _), = plans.segments_done([7])  # fmt: skip
    assert (uid, kind) == (7, SnapshotKind.SYSTEM)
    assert plans.pop(7) is not None and plans.pop(7) is None
