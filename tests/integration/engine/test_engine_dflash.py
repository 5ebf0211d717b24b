"""Speculation with a DFlash drafter (issue 27, kind `dflash`): greedy output equals greedy
output without speculation on a tiny Qwen3 with a random drafter (mlx-vlm's class), alone
and in a batch of 8 mixing dflash, ngram and no drafts; a drafter built to predict its
target (tests.dflash_checkpoints: the repeater) has every draft accepted in a batch of 8,
which it can only if each row reads its own hidden states; a drafter made for another
target, and the kinds asked of a model without their drafter, are refused in one line,
before anything is loaded. Real forwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind
from tests.dflash_checkpoints import make_dflash_drafter, make_qwen3_target, make_repeater_pair

from .engine_helpers import random_prompts, request

pytestmark = pytest.mark.usefixtures("verify_every_draft")

DFLASH, NGRAM, NONE = DraftKind.DFLASH, DraftKind.NGRAM, DraftKind.NONE


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A random tiny Qwen3 and a random DFlash drafter for it."""
    root = tmp_path_factory.mktemp("dflash")
    target = make_qwen3_target(root / "qwen3")
    return target, make_dflash_drafter(root / "qwen3-dflash", target)


def _prompts(info: ModelInfo, n: int) -> list[list[int]]:
    return random_prompts(n, info.vocab_size - 1, (5, 25), seed=17)  # never the mask token


def _run(engine: Engine, info: ModelInfo, prompts: list[list[int]], **params: object):
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    return [h.collect()[0] for h in handles]


def test_dflash_alone_and_in_a_mixed_batch_equals_plain(
    make_engine, pair: tuple[Path, Path]
) -> None:
    target, drafter = pair
    engine = make_engine()
    info = engine.load_model(target, draft=drafter)
    assert info.draft is not None and info.draft.kind is DFLASH
    attached = engine.draft_of(info)  # what /v1/models and `mlxd show` say of it
    assert attached is not None and attached.kind is DFLASH and attached.model == drafter.name
    prompts = _prompts(info, 8)
    params = dict(max_tokens=24, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    for prompt, tokens in zip(prompts[:2], plain, strict=False):
        assert _run(engine, info, [prompt], draft_kind=DFLASH, num_draft_tokens=4, **params) == [
            tokens
        ]
    kinds = [DFLASH, NGRAM, NONE]
    handles = [
        engine.submit(
            request(info, p, draft_kind=kinds[i % 3], num_draft_tokens=1 + i % 7, **params)
        )
        for i, p in enumerate(prompts)
    ]
    results = [h.collect() for h in handles]
    assert [tokens for tokens, _ in results] == plain
    counters = engine.stats().counters
    assert counters.drafted_by_kind["dflash"] > 0 and counters.drafted_by_kind["model"] == 0
    assert sum(counters.drafted_by_kind.values()) == counters.draft_tokens_total
    assert [finish.timings.draft_kind for _, finish in results][:3] == ["dflash", "ngram", None]


def test_a_drafter_that_predicts_its_target_has_every_draft_accepted(
    make_engine, tmp_path: Path
) -> None:
    """The repeater: each row's draft is the most frequent token of its own context and
    next token, its target's next token repeats the current one; 8 rows of different last
    tokens batched: a row reading another row's states (or rejected positions') would
    draft that row's token. After a row's first step every draft is accepted."""
    target, drafter = make_repeater_pair(tmp_path)
    engine = make_engine()
    info = engine.load_model(target, draft=drafter)
    prompts = [[7 + i, 30 + 2 * i, 100 + 3 * i] for i in range(8)]
    params = dict(max_tokens=33, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    assert plain == [[p[-1]] * 33 for p in prompts]  # the checkpoint does what it says
    plain_steps = engine.stats().counters.steps_total
    assert _run(engine, info, prompts, draft_kind=DFLASH, num_draft_tokens=4, **params) == plain
    counters = engine.stats().counters
    assert counters.drafted_by_kind["dflash"] > 0
    assert counters.accepted_by_kind["dflash"] == counters.drafted_by_kind["dflash"]
    # A first step without context, then 5 tokens per verify forward: 10 steps, not 35.
    assert (counters.steps_total - plain_steps) * 3 <= plain_steps


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (dict(hidden_size=32, head_dim=8), "hidden size 32"),
        (dict(vocab_size=300), "vocabulary 300"),
        (dict(target_layer_ids=[0, 5]), "target layers [0, 5], of 2"),
    ],
)
def test_a_drafter_for_another_target_is_refused_before_loading(
    make_engine, pair: tuple[Path, Path], tmp_path: Path, change: dict, said: str
) -> None:
    target, _ = pair
    other = make_dflash_drafter(tmp_path / "other", target, **change)
    engine = make_engine()
    with pytest.raises(InvalidRequest, match="does not fit") as caught:
        engine.load_model(target, draft=other)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.param == "draft_model"
    assert engine.resident() == ()  # nothing loaded half-way


def test_dflash_without_its_drafter_is_refused(
    make_engine, pair: tuple[Path, Path], tiny_chat_model: Path, tiny_draft_model: Path
) -> None:
    target, drafter = pair
    engine = make_engine()
    bare = engine.load_model(target)
    with pytest.raises(InvalidRequest, match="no draft model is attached") as caught:
        engine.submit(request(bare, [5, 6, 7], draft_kind=DFLASH, max_tokens=4))
    assert caught.value.param == "draft_kind"
    with_model = engine.load_model(tiny_chat_model, draft=tiny_draft_model)
    with pytest.raises(InvalidRequest, match="is not a DFlash drafter"):
        engine.submit(request(with_model, [5, 6, 7], draft_kind=DFLASH, max_tokens=4))
    with_dflash = engine.load_model(target, "with-dflash", draft=drafter)
    with pytest.raises(InvalidRequest, match="is not a draft model"):
        engine.submit(request(with_dflash, [5, 6, 7], draft_kind=DraftKind.MODEL, max_tokens=4))


def test_the_drafter_is_primed_over_the_whole_prompt(make_engine, tmp_path: Path) -> None:
    """The prefill's forwards feed each row's drafter context, every chunk of them: the
    first decode step drafts already (a 2-token answer drafts once, at its first step), and
    its draft is the prompt's most frequent token (the repeater's rule), which only a
    drafter that saw the prompt's first chunks proposes: 40 repeats, 9 is drafted."""
    target, drafter = make_repeater_pair(tmp_path)
    engine = make_engine(prefill_chunk=64)
    info = engine.load_model(target, draft=drafter)
    params = dict(max_tokens=2, ignore_eos=True, draft_kind=DFLASH, num_draft_tokens=4)
    assert _run(engine, info, [[5, 6, 40]], **params) == [[40, 40]]
    counters = engine.stats().counters
    assert counters.drafted_by_kind["dflash"] == counters.accepted_by_kind["dflash"] == 1
    assert _run(engine, info, [[9] * 150 + [40] * 100], **params) == [[40, 40]]
    counters = engine.stats().counters
    assert counters.drafted_by_kind["dflash"] == 2 and counters.accepted_by_kind["dflash"] == 1


def test_dflash_on_a_hybrid_target_equals_plain(
    make_engine, tiny_gated_model: Path, tmp_path: Path
) -> None:
    """A random drafter on the tiny Qwen3-Next (gated delta-nets, rolled back after each
    verify): greedy output equals plain, in a batch of 4 (drafts are mostly rejected)."""
    drafter = make_dflash_drafter(tmp_path / "gated-dflash", tiny_gated_model)
    engine = make_engine()
    info = engine.load_model(tiny_gated_model, draft=drafter)
    prompts = _prompts(info, 4)
    params = dict(max_tokens=16, ignore_eos=True)
    plain = _run(engine, info, prompts, draft_kind=NONE, **params)
    assert _run(engine, info, prompts, draft_kind=DFLASH, num_draft_tokens=3, **params) == plain
    assert engine.stats().counters.drafted_by_kind["dflash"] > 0


def test_the_drafter_state_goes_with_the_prefix_cache(make_engine, tmp_path: Path) -> None:
    """A second turn reusing the first's cache drafts as a cold prefill of its whole prompt
    does: the snapshot kept the drafter's context over the reused positions. The repeater
    tells: over the whole prompt 9 outvotes 40 (its first draft is rejected), over the new
    tokens alone 40 would be drafted and accepted."""
    target, drafter = make_repeater_pair(tmp_path)
    params = dict(max_tokens=2, ignore_eos=True, draft_kind=DFLASH, num_draft_tokens=4)
    warm = make_engine()
    info = warm.load_model(target, draft=drafter)
    turn1 = [9] * 60 + [40]
    (answer1,) = _run(warm, info, [turn1], **params)
    turn2 = turn1 + answer1 + [40] * 5
    before = warm.stats().counters
    handle = warm.submit(request(info, turn2, **params))
    answer2, finish = handle.collect()
    after = warm.stats().counters
    assert finish.usage.cached_tokens > len(turn1)
    cold = make_engine(prefix_cache_bytes=0)
    cold_info = cold.load_model(target, draft=drafter)
    assert _run(cold, cold_info, [turn2], **params) == [answer2]
    cold_counts = cold.stats().counters
    assert (
        (
            after.drafted_by_kind["dflash"] - before.drafted_by_kind["dflash"],
            after.accepted_by_kind["dflash"] - before.accepted_by_kind["dflash"],
        )
        == (cold_counts.drafted_by_kind["dflash"], cold_counts.accepted_by_kind["dflash"])
        == (1, 0)
    )
