"""Speculative decoding in the continuous batch (issue 14): greedy output with drafts equals
greedy output without, alone and next to requests that do not speculate; real forwards."""

from __future__ import annotations

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind, FinishReason
from tests.integration.chat.scripted import make_scripted_checkpoint

from .engine_helpers import collect_events, random_prompts, request

# The drafting policy verifies every draft: these tests check the verify step itself.
pytestmark = pytest.mark.usefixtures("verify_every_draft")

NGRAM = DraftKind.NGRAM


def _copy_prompts(info: ModelInfo, n: int) -> list[list[int]]:
    """Prompts of one repeated token (random weights answer them with runs and loops, which
    prompt lookup drafts well), every other one after a random start."""
    starts = random_prompts(n, info.vocab_size, (3, 9), seed=3)
    tokens = [20, 100, 300, 20, 100, 300, 20, 100]
    return [
        (start if i % 2 else []) + [tokens[i % len(tokens)]] * (25 + i)
        for i, start in enumerate(starts)
    ]


def _run(engine: Engine, info: ModelInfo, prompts: list[list[int]], **params: object):
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    return [h.collect()[0] for h in handles]


def test_ngram_greedy_alone_equals_plain(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompts = _copy_prompts(info, 4)
    params = dict(max_tokens=40, ignore_eos=True)
    plain = [_run(engine, info, [p], **params)[0] for p in prompts]
    spec = [
        _run(engine, info, [p], draft_kind=NGRAM, num_draft_tokens=4, **params)[0] for p in prompts
    ]
    assert spec == plain
    stats = engine.stats()
    assert stats.counters.draft_tokens_total > 0
    assert 0 < stats.counters.accepted_tokens_total <= stats.counters.draft_tokens_total


def test_ngram_mixed_batch_of_8_equals_plain(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompts = _copy_prompts(info, 8)
    params = dict(max_tokens=32, ignore_eos=True)
    plain = _run(engine, info, prompts, **params)
    handles = []
    for i, p in enumerate(prompts):
        extra = dict(draft_kind=NGRAM, num_draft_tokens=1 + i % 5) if i % 2 == 0 else {}
        if i == 3:
            extra = dict(logprobs=True, top_logprobs=2)  # a non-speculating logprobs row
        handles.append(engine.submit(request(info, p, **params, **extra)))
    mixed = [h.collect()[0] for h in handles]
    assert mixed == plain
    assert engine.stats().counters.accepted_tokens_total > 0


def test_draft_counts_reach_each_request_timings(chat: tuple[Engine, ModelInfo]) -> None:
    """Per-request drafted/accepted counts add up to the engine totals; a request that does
    not speculate counts none."""
    engine, info = chat
    prompts = _copy_prompts(info, 4)
    before = engine.stats()
    handles = [
        engine.submit(
            request(info, p, max_tokens=120, ignore_eos=True, draft_kind=NGRAM if i else None)
        )
        for i, p in enumerate(prompts)
    ]
    timings = [h.collect()[1].timings for h in handles]
    after = engine.stats()
    assert timings[0].draft_tokens == timings[0].accepted_draft_tokens == 0
    assert all(
        0 <= t.accepted_draft_tokens <= t.draft_tokens and t.draft_tokens for t in timings[1:]
    )
    drafted = after.counters.draft_tokens_total - before.counters.draft_tokens_total
    accepted = after.counters.accepted_tokens_total - before.counters.accepted_tokens_total
    assert sum(t.draft_tokens for t in timings) == drafted
    assert sum(t.accepted_draft_tokens for t in timings) == accepted > 0


def test_ngram_respects_budget_stop_tokens_and_logprobs(chat: tuple[Engine, ModelInfo]) -> None:
    engine, info = chat
    prompt = _copy_prompts(info, 1)[0]
    plain, _ = engine.submit(request(info, prompt, max_tokens=30, ignore_eos=True)).collect()
    stop = plain[7]
    for max_tokens in (1, 2, 5, 13):
        got, fin = engine.submit(
            request(info, prompt, max_tokens=max_tokens, ignore_eos=True, draft_kind=NGRAM)
        ).collect()
        assert got == plain[:max_tokens] and fin.reason is FinishReason.LENGTH
    got, fin = engine.submit(
        request(info, prompt, max_tokens=30, stop_token_ids=(stop,), draft_kind=NGRAM)
    ).collect()
    assert got == plain[: plain.index(stop)] and fin.reason is FinishReason.STOP
    events, fin = collect_events(
        engine.submit(
            request(info, prompt, max_tokens=12, ignore_eos=True, logprobs=True, draft_kind=NGRAM)
        )
    )
    ref, _ = collect_events(
        engine.submit(request(info, prompt, max_tokens=12, ignore_eos=True, logprobs=True))
    )
    lps = [lp for e in events for lp in e.logprobs]
    ref_lps = [lp for e in ref for lp in e.logprobs]
    assert [lp.token_id for lp in lps] == plain[:12]
    assert [lp.logprob for lp in lps] == pytest.approx([lp.logprob for lp in ref_lps], abs=1e-4)


def test_engine_default_draft_kind_and_request_turning_it_off(make_engine, tiny_chat_model):
    engine = make_engine(draft_kind=NGRAM, num_draft_tokens=3)
    info = engine.load_model(tiny_chat_model)
    prompt = _copy_prompts(info, 1)[0]
    on, _ = engine.submit(request(info, prompt, max_tokens=24, ignore_eos=True)).collect()
    drafted = engine.stats().counters.draft_tokens_total
    assert drafted > 0
    off, _ = engine.submit(
        request(info, prompt, max_tokens=24, ignore_eos=True, draft_kind=DraftKind.NONE)
    ).collect()
    assert off == on and engine.stats().counters.draft_tokens_total == drafted
    with pytest.raises(InvalidRequest, match="draft"):
        engine.submit(request(info, prompt, draft_kind=DraftKind.MODEL))
    with pytest.raises(InvalidRequest, match="num_draft_tokens"):
        engine.submit(request(info, prompt, num_draft_tokens=17))


SCRIPT = ["Alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta"]


@pytest.fixture
def scripted(make_engine, checkpoints_dir) -> tuple[Engine, ModelInfo]:
    path = checkpoints_dir / "scripted-spec"
    if not path.exists():
        make_scripted_checkpoint(path, SCRIPT)
    engine = make_engine()
    return engine, engine.load_model(path)


@pytest.mark.parametrize(("stop_at", "budget"), [(3, 30), (0, 30), (5, 3)])
def test_drafts_past_a_stop_token_are_not_accepted(scripted, stop_at: int, budget: int) -> None:
    """The prompt holds the script, so prompt lookup drafts the 4 tokens after its first one
    and the target accepts them all; a stop token (or the budget) inside that draft ends the
    answer there: no token after it is emitted, and only drafts up to it count as accepted."""
    engine, info = scripted
    ids = [info.tokenizer.encode(chunk, add_special_tokens=False)[0] for chunk in SCRIPT]
    prompt = [7, *ids, 7]  # greedy: the script from its start, whatever the prompt
    before = engine.stats()
    got, fin = engine.submit(
        request(info, prompt, max_tokens=budget, stop_token_ids=(ids[stop_at],),
                draft_kind=NGRAM, num_draft_tokens=4)
    ).collect()  # fmt: skip
    after = engine.stats()
    end = min(stop_at, budget)  # emitted tokens: the stop token is not one
    assert got == ids[:end]
    assert fin.reason is (FinishReason.STOP if stop_at < budget else FinishReason.LENGTH)
    drafted = min(4, budget - 1)  # one verify step: the draft fits the budget after token 1
    accepted = min(stop_at + 1, budget) - 1  # the first token is the target's own
    assert (fin.timings.draft_tokens, fin.timings.accepted_draft_tokens) == (drafted, accepted)
    assert after.counters.accepted_tokens_total - before.counters.accepted_tokens_total == accepted
    assert fin.usage.completion_tokens == min(stop_at + 1, budget)
