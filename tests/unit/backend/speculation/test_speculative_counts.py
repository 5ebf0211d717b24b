"""Per-row speculation (backend.speculative.Drafts): what one step reports per uid, and
which drafts the policy lets through."""

from __future__ import annotations

from mlxd.backend.api import DraftCount
from mlxd.backend.speculation.draft_policy import DraftPolicy, StepCosts
from mlxd.backend.speculation.drafts import Drafts
from mlxd.types import DraftKind


def test_counts_are_per_row_summed_within_a_step_and_taken_once() -> None:
    drafts = Drafts()
    drafts.record(7, 4, 3)
    drafts.record(9, 0, 0)  # a row without a draft this step reports nothing
    drafts.record(7, 2, 2)
    drafts.record(8, 4, 0)
    assert drafts.take_counts() == {7: DraftCount(6, 5), 8: DraftCount(4, 0)}
    assert drafts.take_counts() == {}


def test_the_policy_width_truncates_drafts_and_a_fixed_row_keeps_its_own() -> None:
    class Linear(StepCosts):
        def ratio(self, rows: int, width: int, kinds: str = "") -> float:
            return 1.0 + width

        def needs_plain(self, rows: int) -> bool:
            return False

    drafts = Drafts(policy=DraftPolicy(Linear()))
    drafts.add(1, DraftKind.NGRAM, 4)
    drafts.add(2, DraftKind.NGRAM, 4)
    loop = [5, 6, 7, 8, 9] * 3
    assert drafts.propose([1, 2], [loop, loop], [5, 5], [9, 9]) == [[], []]
    drafts.add(2, DraftKind.NGRAM, 2, fixed=True)
    assert drafts.propose([1, 2], [loop, loop], [5, 5], [9, 9]) == [[6, 7], [6, 7]]


def test_a_step_parks_unread_when_no_offer_could_be_verified() -> None:
    """`parks`: the rows' longest drafts at their records would not be verified, so the step
    is plain without reading its tokens (counted as parked); a fixed row never parks."""

    class Costly(StepCosts):
        def ratio(self, rows: int, width: int, kinds: str = "") -> float:
            return 1.0 + 5.0 * width

        def needs_plain(self, rows: int) -> bool:
            return False

    drafts = Drafts(policy=DraftPolicy(Costly()))
    assert drafts.parks([1], [9])  # no speculating row: plain
    assert drafts.take_parked() == 0
    drafts.add(1, DraftKind.NGRAM, 4)
    assert drafts.parks([1, 2], [9, 9]) and drafts.take_parked() == 1
    drafts.policy = DraftPolicy(StepCosts())  # nothing measured: a plain step measures first
    assert drafts.parks([1, 2], [9, 9])
    drafts.add(2, DraftKind.NGRAM, 2, fixed=True)
    assert not drafts.parks([1, 2], [9, 9])


def test_a_new_row_starts_from_its_kinds_pooled_acceptance() -> None:
    """Rows of one drafter accept alike: a row joining after others of its kind verified
    starts from their record (and is not probed), not from the prior."""
    drafts = Drafts()
    drafts.add(1, DraftKind.NGRAM, 3)
    first = drafts.rows[1].odds
    assert first.p == 0.5 and not first.tried
    for _ in range(4):
        drafts.record(1, 3, 3)
    drafts.add(2, DraftKind.NGRAM, 3)
    joined = drafts.rows[2].odds
    assert joined.tried and joined.p > 0.85
    drafts.record(2, 3, 0)  # its own record takes over
    assert joined.p < 0.7
    for _ in range(300):
        joined.idle()
    assert joined.p > 0.85  # and drifts back to its kind's, not to 0.5
