"""The prefill grouping rules: prompts go together while the group's tokens cost less than G,
what a group's steps to its first token cost beyond its prompt tokens (measured, or
STEPS_TO_FIRST_TOKEN = 3 decode steps until a group was timed); while G is under
COMPUTE_BOUND of the queue's mean prompt cost the queue goes one at a time, otherwise in the
groups that minimise its mean wait plus its longest wait."""

from __future__ import annotations

import pytest

from mlxd.backend.prefill_plan import COMPUTE_BOUND, STEPS_TO_FIRST_TOKEN, PrefillPlanner


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


def test_compute_bound_steps_prefill_one_at_a_time_however_long_the_queue() -> None:
    # 256 tokens cost 102.4 ms, G three 10 ms steps: 0.29 of a prompt, under COMPUTE_BOUND.
    # Nobody waits for another's prompt, whatever waits behind.
    planner = measured(decode_s=0.010, token_s=0.0004)
    assert [planner.plan([256] * k) for k in (2, 5, 12)] == [1, 1, 1]


def test_overhead_bound_queues_take_the_least_mean_plus_longest_wait() -> None:
    # 256 tokens cost 51.2 ms, G = 30 ms: 0.59 of a prompt, overhead-bound. Two waiting go
    # together (132 ms each against 81 and 162). Twelve in groups of 4 (mean 470 + last 704
    # ms; groups of 2: 463 + 794, of 6: 506 + 674). (Before, a queue of 2 went one at a time,
    # within 40% of the shortest longest wait, and 12 in groups of 2, the finest within it:
    # changed deliberately, the last of a burst is its p99, and the mean barely moves.)
    planner = measured(decode_s=0.010, token_s=0.0002)
    assert planner.plan([256] * 2) == 2
    assert planner.plan([256] * 12) == 4


def test_a_group_grows_while_its_tokens_cost_less_than_g() -> None:
    # 20-token prompts cost 4 ms each against G = 30 ms: 7 of them (28 ms) start together.
    assert STEPS_TO_FIRST_TOKEN == 3
    planner = measured(decode_s=0.010, token_s=0.0002)
    assert planner._head_plan([20] * 12, 8) == 7
    assert planner.plan([20] * 7) == 7
    # Twelve of them: one at a time the last waits 12 x 34 ms against 108, overhead-bound;
    # the least mean + longest wait is 8 (max_prompts) then 4 (mean 77.3 + last 108 ms; 7
    # then 5: 78.8 + 108). (Before, the head rule's 7 won over the tail rule's 4: changed
    # deliberately with the tail rule.)
    assert planner.plan([20] * 12) == 8


def test_a_timed_group_gives_g_and_g_decides() -> None:
    planner = measured(decode_s=0.010, token_s=0.0002)
    assert planner.group_overhead == pytest.approx(STEPS_TO_FIRST_TOKEN * 0.010)
    # 512-token prompts cost 102.4 ms: G = 30 ms is 0.29 of one, compute-bound.
    assert planner.plan([512] * 3) == 1
    # A group of 2 x 256 took 302.4 ms to its first tokens: 102.4 of prompt tokens, G = 200.
    planner.observe_group(0.3024, padded_tokens=512)
    assert planner.group_s == pytest.approx(0.200)
    # Now overhead-bound: all three together (each waits 507 ms; one at a time 302, 605, 907).
    assert planner.plan([512] * 3) == 3


def test_overhead_bound_the_least_mean_plus_longest_wait_decides() -> None:
    planner = measured(decode_s=0.010, token_s=0.0002)
    planner.observe_group(0.100, padded_tokens=256)  # G = 48.8 ms, a prompt 51.2 ms
    g, c = planner.group_overhead, 0.0002 * 256
    chosen = {}
    for k in (3, 5, 8, 11):
        size = planner.plan([256] * k)

        def cost(s: int, k: int = k) -> float:  # groups of s one after another: mean + last
            w = [min((i // s + 1) * s, k) * c + (i // s + 1) * g for i in range(k)]
            return sum(w) / k + w[-1]

        sizes = range(1, min(k, planner.max_prompts) + 1)
        assert g > COMPUTE_BOUND * c  # overhead-bound
        assert cost(size) == pytest.approx(min(cost(s) for s in sizes)), (k, size)
        assert all(cost(s) > cost(size) + 1e-12 for s in sizes if s < size), (k, size)
        chosen[k] = size
    # Whole waves while they are short, then groups again: the first prompts would wait for
    # too many others' tokens.
    assert chosen == {3: 3, 5: 5, 8: 4, 11: 6}


def test_a_cheap_g_keeps_long_waves_one_at_a_time() -> None:
    # Compute-bound: G is a tenth of a prompt's cost, the last of 16 one at a time waits 9%
    # longer than with all of them together; nobody should wait for 15 others.
    planner = measured(decode_s=0.010, token_s=0.0002, max_prompts=16)
    planner.observe_group(0.010 + 0.0512, padded_tokens=256)
    assert planner.group_s == pytest.approx(0.010)
    assert planner.plan([256] * 16) == 1


def test_padding_counts_against_the_prompt_that_causes_it() -> None:
    planner = measured(decode_s=0.010, token_s=0.0002)
    # Adding a 90-token prompt to a 10-token one pads the first: +170 tokens = 34 ms > 30 ms,
    # past the head rule (the queue's mean wait plus its longest still favours the pair).
    assert planner._head_plan([10, 90], 8) == 1
    assert planner._head_plan([10, 10, 10, 90], 8) == 3
    # A 400-token one: together both wait 190 ms, one at a time 32 and 142 (mean + longest
    # 229 against 380); counted unpadded (82 ms of tokens) the pair would have won (224).
    assert planner.plan([10, 400]) == 1


def test_prompts_longer_than_a_chunk_are_never_grouped() -> None:
    planner = measured(decode_s=1.0, token_s=0.0)
    assert planner.plan([600, 10]) == 1
    assert planner.plan([10, 600]) == 1


def test_estimates_follow_the_regime() -> None:
    planner = measured(decode_s=0.010, token_s=0.0004)
    assert planner.plan([256] * 4) == 1
    for _ in range(40):  # the BLAS got faster (or the batch smaller): prompts became cheap
        planner.observe_prefill(0.010 + 0.000001 * 256, padded_tokens=256)
    assert planner.plan([256] * 4) == 4


def test_prefill_before_any_decode_is_not_attributed() -> None:
    planner = PrefillPlanner(8, static_budget=256, chunk=512)
    planner.observe_prefill(0.5, padded_tokens=100)
    assert planner.token_s is None


def test_one_stalled_step_moves_the_estimates_little() -> None:
    planner = measured(decode_s=0.010, token_s=0.00001)
    # e weighs steps by their tokens: the stall below is judged against steps of its size.
    planner.observe_prefill(0.010 + 0.00001 * 256, padded_tokens=256)
    assert planner.plan([256] * 4) == 4
    planner.observe_decode(0.5)  # the machine stalled this step
    planner.observe_prefill(0.010 + 0.01 * 256, padded_tokens=256)
    assert planner.decode_s is not None and planner.decode_s < 0.015
    assert planner.token_s is not None and planner.token_s < 0.000015
    assert planner.plan([256] * 4) == 4


def test_a_step_of_few_tokens_does_not_stand_for_many() -> None:
    # A prompt served from the prefix cache prefills one token, its step mostly fixed cost
    # (measured on the tiny checkpoint: 5 ms for 1 token, 7 ms for 279). e is weighted by
    # tokens: that step first, then one of 256 tokens, gives about the latter's cost a token.
    planner = PrefillPlanner(8, static_budget=256, chunk=512)
    planner.observe_decode(0.001)
    planner.observe_prefill(0.001 + 0.005, padded_tokens=1)
    planner.observe_prefill(0.001 + 0.00002 * 256, padded_tokens=256)
    assert planner.token_s == pytest.approx(0.00002, rel=0.02)
    # ...and once e is known, such a step moves it by less than a percent.
    planner.observe_prefill(0.001 + 0.005, padded_tokens=1)
    assert planner.token_s == pytest.approx(0.00002, rel=0.01)


def test_g_measured_as_zero_can_grow_again() -> None:
    # G is a difference (a group's time less its tokens' cost): with e overestimated for a
    # while it comes out 0; later groups must still be able to raise it (it used to stay 0,
    # every outlier being judged against it, and the planner went one at a time forever).
    planner = measured(decode_s=0.010, token_s=0.0002)
    planner.observe_group(0.010, padded_tokens=256)  # less than its tokens' 51.2 ms: G = 0
    assert planner.group_s == 0.0
    for _ in range(10):
        planner.observe_group(0.0512 + 0.030, padded_tokens=256)
    assert planner.group_s == pytest.approx(0.030, rel=0.15)


def planner_with(decode_s: float, token_s: float, group_s: float) -> PrefillPlanner:
    planner = PrefillPlanner(16, static_budget=256, chunk=512)
    planner.observe_decode(decode_s)
    planner.observe_prefill(decode_s + token_s * 260, padded_tokens=260)
    planner.observe_group(group_s + token_s * 260, padded_tokens=260)
    assert planner.group_s == pytest.approx(group_s)
    return planner


def test_the_measured_regimes_are_told_apart() -> None:
    # Step costs measured in this machine's servers (260-token prompts). The 93M `xl`
    # checkpoint: a prompt 0.91 s, G 0.3 s (three ~100 ms decode steps): every burst one at
    # a time, each client's first token as soon as its own prompt is done.
    xl = planner_with(decode_s=0.100, token_s=0.0035, group_s=0.300)
    assert [xl.plan([260] * k) for k in (2, 4, 8, 16)] == [1, 1, 1, 1]
    # The tiny checkpoint: a prompt 6.5 ms, G 7 ms (the engine's per-step work): 2 or 4
    # waiting together, a burst of 8 or 16 in two groups (the rule before: 1, 2, 2, 3, so
    # bursts in 4 and 6 groups, whose last waited 2-4 G longer, and what was left of a
    # burst, once a few, one at a time).
    tiny = planner_with(decode_s=0.0015, token_s=0.000025, group_s=0.007)
    assert [tiny.plan([260] * k) for k in (2, 4, 8, 16)] == [2, 4, 5, 9]


def test_the_planner_times_a_group_from_its_first_step_to_its_first_tokens() -> None:
    planner = PrefillPlanner(8, 256, 512)
    planner.expect(0)
    planner.step_done(0.0, 0.01, prefilling=False)  # a decode step: d
    planner.expect(100, starts=100)
    planner.step_done(1.0, 1.11, prefilling=True)  # starts the group: e from its extra cost
    assert planner.decode_s == 0.01 and planner.token_s is not None
    planner.expect(None, first_tokens=True)
    planner.step_done(1.11, 1.5, prefilling=False)  # its first tokens: G beyond e * P
    assert planner.group_s is not None and planner.group_s > 0


def test_chunks_beside_decoding_rows_fit_a_bounded_step() -> None:
    from mlxd.backend.prefill_plan import BESIDE_DECODE, MIN_CHUNK, PROBE_CHUNK

    planner = PrefillPlanner(8, static_budget=256, chunk=512)
    assert planner.chunk_beside(decoding=4, prompts=1) == PROBE_CHUNK  # costs unknown: a probe
    assert planner.chunk_beside(decoding=0, prompts=1) == 512
    planner = measured(0.020, 0.0002)  # a 20 ms decode step, 0.2 ms per prompt token
    assert planner.chunk_beside(decoding=0, prompts=1) == 512  # nobody waits for tokens
    beside = planner.chunk_beside(decoding=4, prompts=1)
    assert beside == int((BESIDE_DECODE - 1) * 0.020 / 0.0002) == 100
    assert 0.020 + 0.0002 * beside <= BESIDE_DECODE * 0.020 + 1e-9
    assert planner.chunk_beside(decoding=4, prompts=2) == 50  # two prompts side by side
    assert measured(0.001, 0.01).chunk_beside(4, 1) == MIN_CHUNK  # never below the floor
    assert measured(0.5, 0.0001).chunk_beside(4, 1) == 512  # never above the chunk


def test_chunks_beside_decoding_rows_follow_their_own_measured_cost() -> None:
    """A long prompt's chunks cost more per token as it grows (attention spans more positions,
    and each chunk has a fixed cost): the next chunk is sized from the last chunks' cost, not
    from e, so the step stays within BESIDE_DECODE decode steps."""
    from mlxd.backend.prefill_plan import BESIDE_DECODE, MIN_CHUNK

    planner = measured(0.002, 0.00001)  # e from short prompts: 200 tokens fit beside 2 ms
    size = planner.chunk_beside(decoding=4, prompts=1)
    assert size == 200
    for _ in range(40):  # each chunk costs 1 ms fixed + 0.01 ms per token beyond a decode step
        planner.expect(None, beside=size)
        planner.step_done(0.0, 0.002 + 0.001 + 0.00001 * size, prefilling=True)
        size = planner.chunk_beside(decoding=4, prompts=1)
    assert size == 100  # (2 - 1) * 2 ms = 1 ms fixed + 100 x 0.01 ms: the whole step fits
    assert 0.002 + 0.001 + 0.00001 * size <= BESIDE_DECODE * 0.002 + 1e-9
    planner.expect(None, beside=size)
    planner.step_done(0.0, 0.5, prefilling=True)  # one stalled step moves it, within bounds
    assert MIN_CHUNK <= planner.chunk_beside(decoding=4, prompts=1) < size
    planner.expect(None, beside=0)  # no row decoded: the step says nothing of the rows' cost
    before = planner.beside_s
    planner.step_done(0.0, 9.0, prefilling=True)
    assert planner.beside_s == before


def test_chunks_beside_decoding_rows_are_sized_against_the_median_decode_step() -> None:
    """A few stalled decode steps (another process on the machine) raise the mean d, not the
    median the chunks beside decoding rows are sized against."""
    steady, stalled = measured(0.002, 0.00001), measured(0.002, 0.00001)
    for seconds in [0.002] * 10 + [0.006] * 4:
        stalled.observe_decode(seconds)
        steady.observe_decode(0.002)
    assert stalled.decode_s is not None and stalled.decode_s > 0.003  # the mean moved
    assert stalled.decode_median == steady.decode_median == 0.002
    assert stalled.chunk_beside(decoding=4, prompts=1) == steady.chunk_beside(4, 1) == 200
