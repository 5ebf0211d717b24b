"""Speculation on hybrid targets (issue 27): recurrent layers (qwen3_next gated delta-nets,
lfm2 short convolutions) are rolled back to each row's accepted length after a verify step,
so ngram and draft-model speculation draft on them, and greedy output equals greedy output
without speculation, alone and in a mixed batch. Real forwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.types import DraftKind

from .engine_helpers import random_prompts, request

pytestmark = pytest.mark.usefixtures("verify_every_draft")

MODEL, NGRAM, NONE = DraftKind.MODEL, DraftKind.NGRAM, DraftKind.NONE


def _prompts(info: ModelInfo, n: int) -> list[list[int]]:
    """Runs of one token after random starts: prompt lookup drafts more of the run, which
    random weights mostly reject (rejections to roll back; test_recurrent_rollback checks
    every kept length against feeding the kept tokens alone)."""
    starts = random_prompts(n, info.vocab_size, (3, 9), seed=5)
    return [start + [5 + 7 * (i % 2)] * (20 + i) for i, start in enumerate(starts)]


def _run(engine: Engine, info: ModelInfo, prompts: list[list[int]], **params: object):
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    return [h.collect()[0] for h in handles]


@pytest.fixture(params=["gated", "hybrid"])
def hybrid_pair(
    request: pytest.FixtureRequest, make_engine, tiny_chat_model: Path
) -> tuple[Engine, ModelInfo, Engine, ModelInfo]:
    """The hybrid target alone, and with a plain draft model of the same tokenizer (random
    weights: it drafts every step and is mostly rejected, so rows roll back every step)."""
    path: Path = request.getfixturevalue(f"tiny_{request.param}_model")
    plain, drafting = make_engine(), make_engine()
    return (
        plain,
        plain.load_model(path),
        drafting,
        drafting.load_model(path, draft=tiny_chat_model),
    )


def _drafted(engine: Engine) -> tuple[int, int]:
    counters = engine.stats().counters
    return counters.draft_tokens_total, counters.accepted_tokens_total


def test_draft_model_on_hybrid_alone_equals_plain(hybrid_pair) -> None:
    engine, info, drafting, dinfo = hybrid_pair
    params = dict(max_tokens=30, ignore_eos=True)
    for prompt in _prompts(info, 3):
        plain = _run(engine, info, [prompt], **params)
        assert _run(drafting, dinfo, [prompt], draft_kind=MODEL, num_draft_tokens=3, **params) == (
            plain
        )
    drafted, accepted = _drafted(drafting)
    assert drafted > accepted  # drafts were verified and rejected ones rolled back


def test_mixed_batch_of_8_on_hybrid_equals_plain(hybrid_pair) -> None:
    """Rows drafting with the model, by prompt lookup, and not at all, in one batch."""
    engine, info, drafting, dinfo = hybrid_pair
    prompts = _prompts(info, 8)
    params = dict(max_tokens=32, ignore_eos=True)
    plain = _run(engine, info, prompts, **params)
    kinds = [MODEL, NGRAM, NONE]
    handles = [
        drafting.submit(
            request(dinfo, p, draft_kind=kinds[i % 3], num_draft_tokens=1 + i % 4, **params)
        )
        for i, p in enumerate(prompts)
    ]
    assert [h.collect()[0] for h in handles] == plain
    drafted, accepted = _drafted(drafting)
    assert drafted > accepted
