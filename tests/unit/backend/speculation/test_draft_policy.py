"""The drafting policy's choice of verify width, on fake step costs (no model)."""

from __future__ import annotations

import pytest

from mlxd.backend.speculation.draft_policy import (
    PRIOR_SLOPE,
    REFRESH,
    VERIFY_REFRESH,
    Acceptance,
    DraftPolicy,
    StepCosts,
    draft_policy_every,
)


class FixedCosts(StepCosts):
    """r(w) = 1 + slope * w, the plain step already measured."""

    def __init__(self, slope: float) -> None:
        super().__init__()
        self.slope = slope

    def ratio(self, rows: int, width: int, kinds: str = "") -> float:
        return 1.0 + self.slope * width

    def needs_plain(self, rows: int) -> bool:
        return False


def _odds(p: float) -> Acceptance:
    """A record of many drafts whose positions were accepted with probability p."""
    odds = Acceptance()
    for _ in range(200):
        odds.accepted, odds.trials = odds.accepted * 0.9 + p, odds.trials * 0.9 + 1
    odds.tried = True
    return odds


def test_flat_cost_drafts_as_wide_as_the_drafts() -> None:
    policy = DraftPolicy(FixedCosts(slope=0.0))
    offers = [(_odds(0.3), 4), (_odds(0.9), 2)]
    assert policy.width(8, offers, most=4) == 4


def test_linear_cost_and_low_acceptance_does_not_draft() -> None:
    policy = DraftPolicy(FixedCosts(slope=1.0))  # a (w+1)-wide forward costs w+1 steps
    assert policy.width(1, [(_odds(0.2), 4)], most=4) == 0
    assert policy.width(8, [(_odds(0.6), 4)] * 4, most=4) == 0


def test_cheap_width_and_good_drafts_draft_where_the_gain_beats_the_cost() -> None:
    policy = DraftPolicy(FixedCosts(slope=0.2))
    assert policy.width(1, [(_odds(0.95), 4)], most=4) == 4
    # one good row among eight does not pay for widening all eight
    assert policy.width(8, [(_odds(0.95), 4)], most=4) == 0


def test_no_offer_or_an_unmeasured_plain_step_runs_the_plain_step() -> None:
    assert DraftPolicy(FixedCosts(slope=0.0)).width(4, [], most=4) == 0
    assert DraftPolicy(StepCosts()).width(4, [(_odds(0.9), 4)], most=4) == 0


def test_rejections_lower_acceptance_and_idle_steps_bring_it_back() -> None:
    odds = Acceptance()
    prior = odds.p
    for _ in range(5):
        odds.observe(drafted=4, accepted=0)
    low = odds.p
    assert low < 0.2 < prior
    for _ in range(400):
        odds.idle()
    assert odds.p == pytest.approx(prior, abs=0.01)
    odds.observe(drafted=4, accepted=4)
    assert odds.p > prior


def test_step_costs_measure_ratios_and_measure_again_when_stale() -> None:
    costs = StepCosts()
    assert costs.needs_plain(2)
    assert costs.ratio(2, 4) == pytest.approx(1.0 + 4 * PRIOR_SLOPE)
    costs.observe(2, 0, 0.010)
    costs.observe(2, 2, 0.020)
    assert not costs.needs_plain(2)
    assert costs.ratio(2, 2) == pytest.approx(2.0)
    assert costs.ratio(2, 4) == pytest.approx(3.0)  # 0.5 plain step per verified position
    assert costs.ratio(3, 1) == pytest.approx(1.5)  # the nearest measured row count
    for i in range(VERIFY_REFRESH):
        costs.started(2, 0, float(i))
        costs.spoil()
    assert costs.ratio(2, 4) == pytest.approx(2.0)  # worth a new try: the slope counts half
    for i in range(REFRESH - VERIFY_REFRESH):
        costs.started(2, 0, float(i))
        costs.spoil()
    assert costs.needs_plain(2)
    costs.observe(2, 0, 0.010)
    costs.observe(2, 4, 0.030)
    assert costs.ratio(2, 4) == pytest.approx(3.0)


def test_a_step_lasts_from_its_start_to_the_next_and_a_spoiled_one_is_no_sample() -> None:
    costs = StepCosts()
    costs.started(4, 0, -2.0)
    costs.started(4, 2, -1.0)  # a shape's first step is no sample (kernels are built)
    costs.started(4, 0, 0.0)
    costs.started(4, 2, 0.010)  # the plain step took 10 ms
    costs.started(4, 0, 0.030)  # the verify step of width 2 took 20 ms
    assert costs.ratio(4, 2) == pytest.approx(2.0)
    costs.spoil()  # the plain step that just started also prefilled
    costs.started(4, 0, 10.0)
    assert costs.ratio(4, 2) == pytest.approx(2.0)


def test_the_policy_setting_accepts_measured_and_every_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MLXD_DRAFT_POLICY", raising=False)
    assert not draft_policy_every()
    monkeypatch.setenv("MLXD_DRAFT_POLICY", "every")
    assert draft_policy_every()
    monkeypatch.setenv("MLXD_DRAFT_POLICY", "sometimes")
    with pytest.raises(ValueError, match="MLXD_DRAFT_POLICY"):
        draft_policy_every()


def test_no_width_that_slows_a_drafting_row_below_a_plain_step() -> None:
    policy = DraftPolicy(FixedCosts(slope=0.15))
    good, poor = (_odds(0.95), 4), (_odds(0.25), 4)  # p 0.88 and 0.29 after the prior
    assert policy.width(8, [good] * 4, most=4) == 4
    # the poor rows expect 1.37 tokens at width 2 (cost 1.3) but 1.41 at 4 (cost 1.6)
    assert policy.width(8, [good] * 4 + [poor] * 4, most=4) == 2


def test_verify_steps_are_measured_per_drafter_set() -> None:
    """A step asking an MTP head also pays its forwards: its verify cost is kept apart from
    prompt lookup's, and a set never measured starts at the prior slope."""
    costs = StepCosts()
    costs.observe(1, 0, 0.010)
    costs.observe(1, 2, 0.012)  # prompt lookup: 1 ms a verified position
    costs.observe(1, 2, 0.050, kinds="mtp")  # the head's forwards: 20 ms a position
    assert costs.ratio(1, 2) == pytest.approx(1.2)
    assert costs.ratio(1, 2, "mtp") == pytest.approx(5.0)
    assert costs.ratio(1, 2, "model") == pytest.approx(1.0 + 2 * PRIOR_SLOPE)
    policy = DraftPolicy(costs)
    sure = [(_odds(0.99), 2)]
    assert policy.width(1, sure, most=2) == 2 and policy.width(1, sure, most=2, kinds="mtp") == 0
    costs.started(1, 2, 0.0, kinds="mtp")
    costs.started(1, 0, 1.0)  # the first step of a shape is no sample
    costs.started(1, 2, 2.0, kinds="mtp")
    costs.started(1, 0, 2.010)  # 10 ms at width 2 with the head: cheap after all
    assert costs.ratio(1, 2, "mtp") < 5.0


def test_a_re_measurement_that_agrees_waits_longer_for_the_next() -> None:
    """Each re-measurement costs a wide step where verifying loses: one that confirms the
    estimate doubles the wait before the next; one that does not resets it."""
    costs = StepCosts()
    costs.observe(2, 0, 0.010)
    costs.observe(2, 2, 0.050)  # 20 ms a verified position: r(2) = 5

    def steps_until_due() -> int:
        n = 0
        while costs.ratio(2, 2) == pytest.approx(5.0):  # due: the slope counts half
            costs.started(2, 0, float(n))
            costs.spoil()  # no samples: only the steps since the last verify count
            n += 1
        return n

    assert steps_until_due() == VERIFY_REFRESH
    costs.observe(2, 2, 0.050)  # it agrees
    assert steps_until_due() == 2 * VERIFY_REFRESH
    costs.observe(2, 2, 0.050)
    assert steps_until_due() == 4 * VERIFY_REFRESH
    costs.observe(2, 2, 0.0)  # it does not (a sample counts at most twice the estimate)
    assert costs.ratio(2, 2) == pytest.approx(4.2)
    n = 0
    while costs.ratio(2, 2) == pytest.approx(4.2):
        costs.started(2, 0, float(n))
        costs.spoil()
        n += 1
    assert n == VERIFY_REFRESH  # back to the first wait


def test_a_dear_verify_is_retried_as_rarely_as_it_is_dear() -> None:
    """Once due, the slope counts over 1 + the waits elapsed: a verify 20 plain steps dear
    per position is tried again only near break-even (about 20 waits), and only steps where its
    drafters are on offer count."""
    costs = StepCosts()
    costs.observe(1, 0, 0.001)
    costs.observe(1, 3, 0.061, kinds="mtp")  # 20 plain steps a verified position
    policy = DraftPolicy(costs)
    sure = [(_odds(0.99), 3)]
    for _ in range(30 * VERIFY_REFRESH):
        costs.started(1, 0, 0.0)  # steps without an mtp row on offer
        costs.spoil()
    assert policy.width(1, sure, most=3, kinds="mtp") == 0
    tried = None
    for n in range(30 * VERIFY_REFRESH):
        if policy.width(1, sure, most=3, kinds="mtp") > 0:
            tried = n
            break
        costs.started(1, 0, float(n), kinds="mtp")
        costs.spoil()
        costs.observe(1, 0, 0.001)  # plain steps keep their measurement
    assert tried is not None and 18 * VERIFY_REFRESH <= tried <= 24 * VERIFY_REFRESH


def test_a_dearer_re_measurement_also_waits_longer() -> None:
    """Only a markedly cheaper verify could change the choice: a re-measurement that finds it
    dearer (a loaded machine) doubles the wait as one that agrees does."""
    costs = StepCosts()
    costs.observe(2, 0, 0.010)
    costs.observe(2, 2, 0.050)
    for n in range(VERIFY_REFRESH):
        costs.started(2, 0, float(n))
        costs.spoil()
    assert costs.ratio(2, 2) < 5.0  # due
    costs.observe(2, 2, 0.090)  # twice as dear
    for n in range(2 * VERIFY_REFRESH - 1):
        costs.started(2, 0, float(n))
        costs.spoil()
        assert costs.ratio(2, 2) > 5.0  # not due before twice the first wait
    costs.started(2, 0, 0.0)
    assert costs.ratio(2, 2) == pytest.approx(3.4)  # due: r(2) = 5.8 at half its slope


def test_a_re_measuring_step_is_one_step_not_every_step_until_its_sample() -> None:
    """A step's time is known only when the next one starts, after the next one's choice:
    the verify step that re-measures makes the estimate not due for that choice."""
    costs = StepCosts()
    costs.started(1, 0, 0.0)
    costs.started(1, 2, 1.0)  # first shapes: no samples
    costs.started(1, 0, 2.0)
    costs.started(1, 2, 2.010)
    costs.started(1, 0, 2.050)  # plain 10 ms, width 2: 40 ms (r(2) = 5)
    policy, sure = DraftPolicy(costs), [(_odds(0.99), 2)]
    for n in range(20 * VERIFY_REFRESH):
        if policy.width(1, sure, most=2) > 0:
            break
        costs.started(1, 0, 3.0 + n)
        costs.spoil()
        costs.observe(1, 0, 0.010)
    assert policy.width(1, sure, most=2) == 2  # due, at an optimistic slope
    costs.started(1, 2, 100.0)  # the re-measuring verify starts; its sample comes later
    assert policy.width(1, sure, most=2) == 0


def test_a_new_row_is_probed_once_at_width_one_where_perfect_drafts_would_pay() -> None:
    """At the prior (p 0.5) a verify costing 0.6 plain steps a position never pays, so a row
    that drafts perfectly would never show it: a row with no verified draft yet is tried at
    width 1 if it pays with every draft right (2 tokens for 1.6 steps), then its own record
    decides."""
    policy = DraftPolicy(FixedCosts(slope=0.6))
    new = Acceptance()
    assert policy.width(1, [(new, 3)], most=3) == 1
    new.observe(drafted=1, accepted=1)
    assert policy.width(1, [(new, 3)], most=3) == 1  # p 0.67: 1.67 tokens for 1.6 steps
    for _ in range(5):
        new.observe(drafted=3, accepted=3)
    assert policy.width(1, [(new, 3)], most=3) == 3  # its record soon pays for width 3
    missed = Acceptance()
    missed.observe(drafted=1, accepted=0)
    assert policy.width(1, [(missed, 3)], most=3) == 0  # probed once, not again


def test_no_probe_where_even_perfect_drafts_lose() -> None:
    """The set's measured cost says when even a right draft loses: no row is probed there."""
    assert DraftPolicy(FixedCosts(slope=1.2)).width(1, [(Acceptance(), 3)], most=3) == 0
    # eight new rows among eight: 16 tokens for 1.6 steps pays; one new among eight does not
    policy = DraftPolicy(FixedCosts(slope=0.6))
    assert policy.width(8, [(Acceptance(), 3)] * 8, most=3) == 1
    assert policy.width(8, [(Acceptance(), 3)] + [(_odds(0.0), 3)] * 7, most=3) == 0


def test_a_verify_faster_than_the_plain_estimate_has_the_plain_step_measured_again() -> None:
    """A wider forward is never cheaper than a one-wide one: a verify step markedly faster
    than the plain estimate shows that estimate inflated (a stalled sample on a loaded
    machine), which would make verifying look free; the next step measures it again."""
    costs = StepCosts()
    costs.observe(1, 0, 0.010)
    costs.observe(1, 0, 0.020)  # a stall: the estimate is now 12 ms
    costs.observe(1, 2, 0.014)  # 14 ms at width 2: slope 1/12 a position, not the true 0.2
    assert not costs.needs_plain(1)
    costs.observe(1, 2, 0.0115)  # within AGREE of the plain estimate: noise
    assert not costs.needs_plain(1)
    costs.observe(1, 2, 0.008)  # markedly faster than the plain estimate
    assert costs.needs_plain(1)
    assert DraftPolicy(costs).width(1, [(_odds(0.3), 2)], most=2) == 0  # a plain step


def test_a_verify_step_that_did_more_work_bounds_its_cost_from_above() -> None:
    """A spoiled verify step (new rows' priming, a prefill) or its shape's first one: where
    its time is no cheaper than the estimate it counts as a re-measurement that agreed (the
    estimate stays, the wait doubles, no second probe right after); where it is markedly
    cheaper it is taken."""
    costs = StepCosts()
    costs.observe(1, 0, 0.010)
    costs.observe(1, 2, 0.050)  # r(2) = 5
    for n in range(VERIFY_REFRESH):
        costs.started(1, 0, float(n), kinds="")
        costs.spoil()
    assert costs.ratio(1, 2) < 5.0  # due
    costs.started(1, 2, 100.0)
    costs.spoil()  # the re-measuring verify also primed new rows
    costs.started(1, 0, 100.2)  # 200 ms: far dearer, but only an upper bound
    costs.spoil()
    assert costs.ratio(1, 2) == pytest.approx(5.0)
    for n in range(2 * VERIFY_REFRESH - 2):
        costs.started(1, 0, 200.0 + n)
        costs.spoil()
        assert costs.ratio(1, 2) == pytest.approx(5.0)  # not due before twice the wait
    costs.started(1, 0, 300.0)
    costs.spoil()
    assert costs.ratio(1, 2) < 5.0  # due again
    costs.started(1, 2, 400.0)
    costs.spoil()
    costs.started(1, 0, 400.012)  # 12 ms at most: markedly cheaper, taken
    assert costs.ratio(1, 2) < 4.5


def test_a_verify_many_plain_steps_dear_waits_past_the_usual_cap() -> None:
    """Each re-measurement of a verify step 9 plain steps dear costs ~8 steps: agreeing ones
    double the wait past VERIFY_REFRESH_MAX, to PROBE_STEPS x 8 (re-measuring then costs ~1%
    of steps); a cheap verify's wait stops at VERIFY_REFRESH_MAX."""
    from mlxd.backend.speculation.draft_policy import PROBE_STEPS, VERIFY_REFRESH_MAX

    def final_wait(verify_s: float) -> int:
        costs = StepCosts()
        costs.observe(1, 0, 0.010)
        costs.observe(1, 1, verify_s)
        for _ in range(12):
            extra = costs._extra[(1, "")]
            extra.since = extra.wait  # due
            costs.observe(1, 1, verify_s)
        return costs._extra[(1, "")].wait

    assert final_wait(0.090) == PROBE_STEPS * 8
    assert final_wait(0.015) == VERIFY_REFRESH_MAX


def test_a_plain_step_that_read_its_tokens_is_measured_apart() -> None:
    """A plain step whose sampled tokens were read for prompt lookup (a sync mlx-lm's plain
    step avoids) is timed apart from plain ones: the plain estimate stays what a parked
    step costs, and `look_cost` is what the read adds, in plain steps."""
    costs = StepCosts()
    assert costs.look_cost(4) == 0.0  # unmeasured: optimistic
    at = 0.0
    for looked, seconds in [(False, 0.010)] * 3 + [(True, 0.013)] * 3 + [(False, 0.010)]:
        costs.started(4, 0, at, looked=looked)
        at += seconds
    costs.started(4, 0, at)
    assert costs._plain[4].seconds == pytest.approx(0.010)
    assert costs.look_cost(4) == pytest.approx(0.3)


def test_each_width_keeps_its_own_cost_in_plain_steps_of_its_time() -> None:
    """A verify step's drafting and syncs cost the same at any width: measured at width 1 and
    3, each width's ratio is its own (an unmeasured one takes the nearest width's cost per
    position). The costs are in plain steps of the time: when the machine gets twice as
    fast (a busy host frees up), the plain step re-measured, the ratios hold."""
    costs = StepCosts()
    costs.observe(4, 0, 0.010)
    costs.observe(4, 1, 0.030)  # 2 plain steps for one position
    costs.observe(4, 3, 0.040)  # 3 for three
    assert costs.ratio(4, 1) == pytest.approx(3.0)
    assert costs.ratio(4, 3) == pytest.approx(4.0)
    assert costs.ratio(4, 2) == pytest.approx(3.0)  # width 3's (nearest, the wider) 1 a position
    for _ in range(40):
        costs.observe(4, 0, 0.005)
    assert costs.ratio(4, 3) == pytest.approx(4.0)
