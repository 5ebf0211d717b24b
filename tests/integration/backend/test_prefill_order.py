"""Time to first token as a scheduling decision, shown step by step on the real BatchRunner:
a request's first token leaves the runner before the next waiting prompt's prefill starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.backend.api import BackendConfig, NewSequence
from mlxd.backend.batch import BatchRunner
from mlxd.backend.loader import load_checkpoint
from mlxd.backend.prefix.cache import PrefixCache
from mlxd.types import SamplingParams
from tests.integration.engine.engine_helpers import random_prompts


def first_steps(checkpoint: Path, prompt_len: int, **cfg) -> dict[str, dict[int, int]]:
    """Step index of each sequence's first token and of its first prefill chunk."""
    runner = BatchRunner(
        load_checkpoint(checkpoint),
        "m",
        PrefixCache(0),
        BackendConfig(
            max_batch=4,
            prefill_chunk=cfg.get("prefill_chunk", 512),
            prefill_batch=4,
            prefill_group_tokens=cfg.get("prefill_group_tokens", 256),
        ),
    )
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    uids = [
        runner.insert(NewSequence(p, params, 6, f"r{i}"))[0]
        for i, p in enumerate(random_prompts(3, 400, (prompt_len, prompt_len + 1), seed=5))
    ]
    token: dict[int, int] = {}
    prefill: dict[int, int] = {}
    finished: set[int] = set()
    try:
        for step in range(200):
            result = runner.step()
            waiting = runner.waiting_uids()
            for uid in uids:
                if uid not in waiting:  # its first prefill chunk ran by this step
                    prefill.setdefault(uid, step)
            for out in result.tokens:
                token.setdefault(out.uid, step)
                if out.finish is not None:
                    finished.add(out.uid)
            if finished == set(uids):
                break
    finally:
        runner.close()
    assert finished == set(uids)
    return {"token": token, "prefill": prefill, "uids": dict(enumerate(uids))}


def test_first_token_is_emitted_before_the_next_prompt_prefills(tiny_chat_model: Path) -> None:
    steps = first_steps(tiny_chat_model, 200)
    uids, token, prefill = steps["uids"], steps["token"], steps["prefill"]
    for i in range(2):
        # strictly earlier: a token returned in the same step waited for that step's prefill
        assert token[uids[i]] < prefill[uids[i + 1]], steps


@pytest.mark.parametrize("chunk", [64, 512])
def test_prompts_still_prefill_in_arrival_order(tiny_chat_model: Path, chunk: int) -> None:
    steps = first_steps(tiny_chat_model, 200, prefill_chunk=chunk)
    uids, token, prefill = steps["uids"], steps["token"], steps["prefill"]
    assert [prefill[uids[i]] for i in range(3)] == sorted(prefill[uids[i]] for i in range(3))
    assert token[uids[0]] < token[uids[1]] < token[uids[2]]
