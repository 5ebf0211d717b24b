"""The prefill grouping rule: prompts go together while each costs less than the steps a
group takes to its first token (STEPS_TO_FIRST_TOKEN = 3)."""

from __future__ import annotations

import pytest

from mlxd.backend.prefill_plan import STEPS_TO_FIRST_TOKEN, PrefillPlanner


def measured(decode_s: float, token_s: float, *, max_prompts: int = 8) -> PrefillPlanner:
    planner = PrefillPlanner(max_prompts, static_budget=256, chunk=512)
    planner.observe_decode(decode_s)
    planner.observe_prefill(decode_s + token_s * 100, padded_tokens=100)
    assert planner.measured
    assert planner.token_s == pytest.approx(token_s)
    return planner


def test_static_budget_decides_until_costs_are_measured() -> None:
    planner = PrefillPlanner(8, static_budget=256, chunk=512)
    assert not planner.measured
    assert planner.plan([100, 100, 100]) == 2  # 2 x 100 padded fits 256, 3 x 100 does not
    assert planner.plan([300, 10]) == 1  # always at least one


def test_overhead_bound_steps_group_every_waiting_prompt() -> None:
    # 256 tokens cost 2.56 ms, a step 10 ms: together is better for everyone.
    planner = measured(decode_s=0.010, token_s=0.00001)
    assert planner.plan([256] * 12) == 8  # capped by max_prompts


def test_compute_bound_steps_prefill_one_at_a_time() -> None:
    # 256 tokens cost 51.2 ms, more than three 10 ms steps: the first prompt should not wait.
    planner = measured(decode_s=0.010, token_s=0.0002)
    assert planner.plan([256] * 12) == 1
    assert planner.plan([100] * 12) == 8  # short prompts (20 ms each) still go together


def test_a_prompt_costing_less_than_the_steps_to_a_first_token_joins() -> None:
    # 256 tokens cost 25.6 ms: more than one 10 ms step, less than the 3 a group takes.
    assert STEPS_TO_FIRST_TOKEN == 3
    planner = measured(decode_s=0.010, token_s=0.0001)
    assert planner.plan([256] * 12) == 8
    assert measured(decode_s=0.010, token_s=0.000125).plan([256] * 12) == 1  # 32 ms


def test_padding_counts_against_the_prompt_that_causes_it() -> None:
    planner = measured(decode_s=0.010, token_s=0.0002)
    # Adding a 90-token prompt to a 10-token one pads the first: +170 tokens = 34 ms > 30 ms.
    assert planner.plan([10, 90]) == 1
    assert planner.plan([10, 10, 10, 90]) == 3


def test_prompts_longer_than_a_chunk_are_never_grouped() -> None:
    planner = measured(decode_s=1.0, token_s=0.0)
    assert planner.plan([600, 10]) == 1
    assert planner.plan([10, 600]) == 1


def test_estimates_follow_the_regime() -> None:
    planner = measured(decode_s=0.010, token_s=0.0002)
    assert planner.plan([256] * 4) == 1
    for _ in range(40):  # the BLAS got faster (or the batch smaller): prompts became cheap
        planner.observe_prefill(0.010 + 0.000001 * 256, padded_tokens=256)
    assert planner.plan([256] * 4) == 4


def test_prefill_before_any_decode_is_not_attributed() -> None:
    planner = PrefillPlanner(8, static_budget=256, chunk=512)
    planner.observe_prefill(0.5, padded_tokens=100)
    assert planner.token_s is None


def test_one_stalled_step_moves_the_estimates_little() -> None:
    planner = measured(decode_s=0.010, token_s=0.0001)
    assert planner.plan([256] * 4) == 4
    planner.observe_decode(0.5)  # the machine stalled this step
    planner.observe_prefill(0.010 + 0.01 * 256, padded_tokens=256)
    assert planner.decode_s is not None and planner.decode_s < 0.015
    assert planner.token_s is not None and planner.token_s < 0.00015
    assert planner.plan([256] * 4) == 4
