"""Per-row speculation (backend.speculative.Drafts): what one step reports per uid, and
which drafts the policy lets through."""

from __future__ import annotations

import pytest

from mlxd.backend.api import DraftCount
from mlxd.backend.speculation.draft_policy import Acceptance, DraftPolicy, StepCosts
from mlxd.backend.speculation.drafts import REPARK, Drafts
from mlxd.types import DraftKind

LOOP = [5, 6, 7, 8, 9] * 3  # prompt lookup can draft after it


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
    assert drafts.parks([1], [9], [LOOP])  # no speculating row: plain
    assert drafts.take_parked() == 0
    drafts.add(1, DraftKind.NGRAM, 4)
    assert drafts.parks([1, 2], [9, 9], [LOOP, LOOP]) and drafts.take_parked() == 1
    drafts.policy = DraftPolicy(StepCosts())  # nothing measured: a plain step measures first
    assert drafts.parks([1, 2], [9, 9], [LOOP, LOOP])
    drafts.add(2, DraftKind.NGRAM, 2, fixed=True)
    assert not drafts.parks([1, 2], [9, 9], [LOOP, LOOP])


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


def test_prompt_lookup_knows_before_the_current_token_whether_it_can_draft() -> None:
    """NgramIndex.may_propose reads only the tokens already on the host: where it says no,
    `propose` drafts nothing whatever the current token is (exact); where it says yes, some
    current token drafts. Random texts over a small vocabulary, grown one token at a time."""
    import random

    from mlxd.backend.speculation.drafts import NgramIndex

    rng = random.Random(5)
    said = {True: 0, False: 0}
    for _ in range(40):
        index, tokens = NgramIndex(), [rng.randrange(12) for _ in range(2)]
        for _ in range(30):
            may = index.may_propose(tokens)
            drafting = [last for last in range(12) if index.propose(tokens, last, 3)]
            assert bool(drafting) == may
            said[may] += 1
            tokens.append(rng.randrange(12))
    assert min(said.values()) > 100  # both answers were exercised


def test_a_lookup_row_that_cannot_draft_parks_the_step_unread() -> None:
    """A prompt-lookup row whose text has no earlier match of its last tokens offers nothing,
    so the step parks without reading its sampled token (and is not counted as parked: no
    row offered); the same row after a repeat offers, and the step reads its tokens."""
    drafts = Drafts(policy=DraftPolicy(StepCosts()))
    drafts.add(1, DraftKind.NGRAM, 3)
    drafts.policy.costs.observe(1, 0, 0.010)
    assert drafts.parks([1], [9], [[1, 2, 3, 4]])
    assert drafts.take_parked() == 0
    assert not drafts.parks([1], [9], [[1, 2, 3, 4, 1, 2]])


def test_while_the_policy_parks_snapshots_keep_no_drafter_state() -> None:
    """A prefix snapshot's MTP head state costs a head forward over the prompt: while the
    policy parks it is not computed (the drafter is not asked), and once a step verifies
    drafts it is again."""

    class Head:
        asked = 0

        def start(self, uid: int) -> None: ...

        def state(self, uid: int, tokens: int, ended: bool = False) -> str:
            Head.asked += 1
            return "head state"

        def propose(self, asks: list[object]) -> list[list[int]]:
            return [[1, 2] for _ in asks]

        def discard(self, uid: int) -> None: ...

        def take_admitted(self) -> bool:
            return False

    class Costly(StepCosts):
        slope = 5.0

        def ratio(self, rows: int, width: int, kinds: str = "") -> float:
            return 1.0 + self.slope * width

        def needs_plain(self, rows: int) -> bool:
            return False

    costs = Costly()
    drafts = Drafts(mtp=Head(), policy=DraftPolicy(costs))  # type: ignore[arg-type]
    drafts.add(1, DraftKind.MTP, 2)
    drafts.rows[1].odds.tried = True
    assert drafts.head_state(1, 4) == "head state"  # nothing parked yet
    assert drafts.parks([1], [9], [[1, 2, 3, 4]])
    assert drafts.head_state(1, 4) is None and Head.asked == 1
    costs.slope = 0.0  # the same rows parked: asked again after REPARK steps
    assert all(drafts.parks([1], [9], [[1, 2, 3, 4]]) for _ in range(REPARK - 1))
    assert not drafts.parks([1], [9], [[1, 2, 3, 4]])
    assert drafts.propose([1], [[1, 2, 3, 4]], [5], [9]) == [[1, 2]]
    assert drafts.head_state(1, 4) == "head state"


def test_prompt_lookup_reads_the_tokens_only_where_its_finds_pay_for_the_sync() -> None:
    """Where only prompt-lookup rows offer, reading the sampled tokens costs a sync whether
    or not a draft turns up: a batch whose reads keep finding nothing (and whose read costs
    half a plain step) parks unread; one whose reads find drafts reads."""

    class Cheap(StepCosts):
        def ratio(self, rows: int, width: int, kinds: str = "") -> float:
            return 1.0 + 0.05 * width

        def needs_plain(self, rows: int) -> bool:
            return False

        def look_cost(self, rows: int) -> float:
            return 0.5

    loop = [5, 6, 7, 8, 9] * 3  # a draft is possible (may_propose)
    for hit, reads in ((0, False), (1, True)):
        drafts = Drafts(policy=DraftPolicy(Cheap()))
        drafts.add(1, DraftKind.NGRAM, 3)
        drafts.rows[1].odds = Acceptance(accepted=20.0, trials=20.0, tried=True)
        for _ in range(20):
            drafts.looks.observe(1, hit)
        assert drafts.parks([1], [9], [loop]) is not reads


def test_a_batch_with_no_speculating_row_runs_untimed_steps() -> None:
    """No row speculates: the step is mlx-lm's own (`idle`), and the steps around it are not
    timed across it (the next timed step opens a new sample)."""
    drafts = Drafts()
    costs = drafts.policy.costs
    drafts.add(1, DraftKind.NGRAM, 3)
    assert not drafts.idle()
    drafts.started(1, 0, 0.0)
    drafts.started(1, 0, 0.010)  # a 10 ms plain step (the first of its shape: no sample)
    drafts.started(1, 0, 0.020)
    drafts.discard(1)
    assert drafts.idle()  # the step started at 0.020 is not closed by the next timed one
    drafts.add(2, DraftKind.NGRAM, 3)
    drafts.started(1, 0, 5.0)
    assert costs._plain[1].seconds == pytest.approx(0.010)
