"""Prefill grouping from measured costs, on the real BatchRunner: the planner learns a decode
step's cost and a prompt token's cost from real steps, and its grouping is what the runner
does (waiting prompts leave the queue together exactly when the planner says so)."""

from __future__ import annotations

import time
from pathlib import Path

from mlxd.backend.api import BackendConfig, NewSequence
from mlxd.backend.batch import BatchRunner
from mlxd.backend.loader import load_checkpoint
from mlxd.backend.mlx_lm import compat
from mlxd.backend.prefill_plan import STEPS_TO_FIRST_TOKEN
from mlxd.backend.prefix.cache import PrefixCache
from mlxd.types import SamplingParams
from tests.integration.engine.engine_helpers import random_prompts


def make_runner(model: Path) -> BatchRunner:
    return BatchRunner(
        load_checkpoint(model),
        "m",
        PrefixCache(0),
        BackendConfig(
            max_batch=8,
            prefill_chunk=512,
            prefill_batch=8,
            prefill_group_tokens=256,
        ),
    )


def test_planner_measures_real_steps_and_the_runner_follows_it(tiny_chat_model: Path) -> None:
    runner = make_runner(tiny_chat_model)
    planner = runner._planner
    assert planner is not None
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    try:
        runner.insert(NewSequence(random_prompts(1, 400, (64, 65), seed=1)[0], params, 40, "first"))
        for _ in range(10):  # prefill the first, then decode steps alone
            runner.step()
        for i, p in enumerate(random_prompts(6, 400, (64, 65), seed=2)):
            runner.insert(NewSequence(p, params, 40, f"r{i}"))
        groups = []
        for _ in range(60):
            waiting = runner.waiting_uids()
            mid_group = compat.prefilling(runner._gen)
            expected = planner.plan([64] * len(waiting)) if waiting and not mid_group else None
            runner.step()
            left = len(waiting) - len(runner.waiting_uids())
            if expected is not None and left:
                groups.append((expected, left))
    finally:
        runner.close()
    assert planner.measured and planner.decode_s and planner.decode_s > 0
    assert planner.token_s is not None and planner.token_s >= 0
    assert groups, "no prefill group started"
    assert all(expected == left for expected, left in groups), groups


def test_a_prompt_takes_the_planned_steps_to_its_first_token(tiny_chat_model: Path) -> None:
    # The planner's rule counts STEPS_TO_FIRST_TOKEN steps from a group's prefill to its
    # first token, each also decoding the running batch: that count is the real runner's.
    runner = make_runner(tiny_chat_model)
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    try:
        first = runner.insert(
            NewSequence(random_prompts(1, 400, (64, 65), seed=1)[0], params, 40, "a")
        )[0]
        while not any(out.uid == first for out in runner.step().tokens):
            pass
        uid, _ = runner.insert(
            NewSequence(random_prompts(1, 400, (64, 65), seed=2)[0], params, 40, "b")
        )
        steps = 0
        while True:
            result = runner.step()
            steps += 1
            assert any(out.uid == first for out in result.tokens)  # the batch kept decoding
            if any(out.uid == uid for out in result.tokens):
                break
    finally:
        runner.close()
    assert steps == STEPS_TO_FIRST_TOKEN


def test_the_runner_times_a_group_from_its_prefill_to_its_first_tokens(
    tiny_chat_model: Path,
) -> None:
    # G, the planner's cost of a group's steps beyond its prompt tokens, comes from real
    # steps: a group's time to its first tokens less what its tokens cost, in a moving
    # average (so never above both the old estimate and that time).
    runner = make_runner(tiny_chat_model)
    planner = runner._planner
    assert planner is not None
    params = SamplingParams(max_tokens=40, ignore_eos=True)
    prompts = random_prompts(5, 400, (64, 65), seed=3)
    try:
        runner.insert(NewSequence(prompts[0], params, 40, "first"))
        for _ in range(6):  # prefill the first, then decode alone: d is known
            runner.step()
        assert planner.group_s is None  # e was unknown at its first token: not timed
        runner.insert(NewSequence(prompts[1], params, 40, "second"))
        for _ in range(STEPS_TO_FIRST_TOKEN):
            runner.step()
        assert planner.measured and planner.group_s is not None and planner.group_s >= 0
        before = planner.group_s
        uids = [
            runner.insert(NewSequence(p, params, 40, f"r{i}"))[0] for i, p in enumerate(prompts[2:])
        ]
        started = time.perf_counter()
        seen: set[int] = set()
        while not seen.intersection(uids):  # the first group of them has its first tokens
            seen.update(out.uid for out in runner.step().tokens)
        took = time.perf_counter() - started
    finally:
        runner.close()
    assert planner.group_s != before  # timed again
    assert 0 <= planner.group_s <= max(before, took)
