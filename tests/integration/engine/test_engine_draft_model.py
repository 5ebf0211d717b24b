"""Speculation with a draft model (issue 14, kind `model`): greedy output equals greedy output
without speculation, with the target's own weights as draft (accepts nearly all) and with a
different random checkpoint of the same tokenizer (accepts little), alone and in a mixed
batch of 8; a draft with another vocabulary is refused before loading. Real forwards."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mlxd.engine import Engine, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import DraftKind, TokenEvent

from .engine_helpers import random_prompts, request

# The drafting policy verifies every draft: these tests check the verify step itself.
pytestmark = pytest.mark.usefixtures("verify_every_draft")

MODEL, NGRAM, NONE = DraftKind.MODEL, DraftKind.NGRAM, DraftKind.NONE


def _prompts(info: ModelInfo, n: int) -> list[list[int]]:
    return random_prompts(n, info.vocab_size, (5, 30), seed=11)


def _run(engine: Engine, info: ModelInfo, prompts: list[list[int]], **params: object):
    handles = [engine.submit(request(info, p, **params)) for p in prompts]
    return [h.collect()[0] for h in handles]


def _acceptance(engine: Engine) -> float:
    stats = engine.stats()
    assert stats.counters.draft_tokens_total > 0
    return stats.counters.accepted_tokens_total / stats.counters.draft_tokens_total


@pytest.mark.parametrize(("draft", "least", "most"), [("self", 0.9, 1.0), ("other", 0.0, 0.6)])
def test_model_draft_alone_equals_plain(
    make_engine,
    tiny_chat_model: Path,
    tiny_draft_model: Path,
    draft: str,
    least: float,
    most: float,
) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    drafter = make_engine()
    source = tiny_chat_model if draft == "self" else tiny_draft_model
    dinfo = drafter.load_model(tiny_chat_model, draft=source)
    assert dinfo.draft is not None and dinfo.draft.path == source.resolve()
    params = dict(max_tokens=40, ignore_eos=True)
    for prompt in _prompts(info, 4):
        plain = _run(engine, info, [prompt], **params)
        assert _run(drafter, dinfo, [prompt], num_draft_tokens=4, **params) == plain
    assert least <= _acceptance(drafter) <= most


@pytest.mark.parametrize("draft", ["self", "other"])
def test_model_draft_mixed_batch_of_8_equals_plain(
    make_engine, tiny_chat_model: Path, tiny_draft_model: Path, draft: str
) -> None:
    """Rows drafting with the model, with ngram, not at all, and a sampled (seeded) one, in
    one batch: each greedy row's output is its output alone without speculation, the
    sampled row's is its output alone (with the same speculation: seeded draws repeat)."""
    engine = make_engine()
    info = engine.load_model(
        tiny_chat_model, draft=tiny_chat_model if draft == "self" else tiny_draft_model
    )
    prompts = _prompts(info, 8)
    params = dict(max_tokens=32, ignore_eos=True)
    plain = [_run(engine, info, [p], draft_kind=NONE, **params)[0] for p in prompts]
    sampled = dict(temperature=0.8, seed=5)
    alone_sampled = _run(engine, info, [prompts[7]], draft_kind=MODEL, **params, **sampled)[0]
    kinds = [
        dict(draft_kind=MODEL, num_draft_tokens=3),
        dict(draft_kind=NGRAM),
        dict(draft_kind=NONE),
        dict(),  # the engine's default: model, since a draft is attached
        dict(draft_kind=MODEL, num_draft_tokens=1),
        dict(draft_kind=MODEL, logprobs=True, top_logprobs=2),
        dict(draft_kind=MODEL, num_draft_tokens=8),
        dict(draft_kind=MODEL, **sampled),
    ]
    before = engine.stats().counters.draft_tokens_total
    handles = [
        engine.submit(request(info, p, **params, **k)) for p, k in zip(prompts, kinds, strict=True)
    ]
    mixed = [h.collect()[0] for h in handles]
    assert mixed[:7] == plain[:7]
    assert mixed[7] == alone_sampled
    assert engine.stats().counters.draft_tokens_total > before


def test_model_draft_after_a_prefix_cache_hit(
    make_engine, tiny_chat_model, tiny_draft_model
) -> None:
    """The second request's prompt is served from the prefix cache; the draft still sees the
    whole prompt (its acceptance with self-draft stays full) and the output is exact."""
    engine = make_engine()
    info = engine.load_model(tiny_chat_model, draft=tiny_chat_model)
    plain = make_engine()
    pinfo = plain.load_model(tiny_chat_model)
    first = _prompts(info, 1)[0] * 4
    second = first + [17, 42, 99]
    params = dict(max_tokens=24, ignore_eos=True)
    for prompt in (first, second):
        assert _run(engine, info, [prompt], **params) == _run(plain, pinfo, [prompt], **params)
    assert engine.stats().counters.cached_tokens_total > 0
    assert _acceptance(engine) >= 0.9


def test_cancelled_and_finished_rows_drop_their_draft_state(make_engine, tiny_chat_model) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model, draft=tiny_chat_model)
    prompts = _prompts(info, 3)
    handle = engine.submit(request(info, prompts[0], max_tokens=200, ignore_eos=True))
    next(iter(handle))
    handle.cancel()
    handle.collect()
    _run(engine, info, prompts[1:], max_tokens=10, ignore_eos=True)
    runner = engine._core.runner
    assert runner is not None and runner._drafts is not None
    drafter = runner._drafts.model
    assert runner._drafts.rows == {} and drafter._uids == [] and drafter._cache is None


def test_draft_with_another_vocabulary_is_refused(
    make_engine, tiny_chat_model, tiny_foreign_vocab_model
):
    engine = make_engine()
    with pytest.raises(
        InvalidRequest, match="tiny-chat-400 does not share the vocabulary of tiny-chat"
    ):
        engine.load_model(tiny_chat_model, draft=tiny_foreign_vocab_model)
    assert engine.stats().models_loaded == ()


def test_a_loaded_model_keeps_its_draft(make_engine, tiny_chat_model, tiny_draft_model) -> None:
    """Loading it again without a draft gives it with its draft; with another draft: refused."""
    engine = make_engine()
    info = engine.load_model(tiny_chat_model, draft=tiny_draft_model)
    assert engine.load_model(tiny_chat_model) is info
    with pytest.raises(InvalidRequest, match="another draft model"):
        engine.load_model(tiny_chat_model, draft=tiny_chat_model)
    drafted = engine.draft_of(info)
    assert drafted is not None and (drafted.model, drafted.kind) == ("tiny-draft", MODEL)


def test_model_kind_without_a_draft_is_refused_and_the_next_request_served(chat) -> None:
    engine, info = chat
    prompt = _prompts(info, 1)[0]
    with pytest.raises(InvalidRequest, match="no draft model is attached to tiny-chat"):
        engine.submit(request(info, prompt, draft_kind=MODEL))
    tokens, _ = engine.submit(request(info, prompt, max_tokens=5, ignore_eos=True)).collect()
    assert len(tokens) == 5


@pytest.mark.parametrize("draft", ["self", "other"])
def test_rows_joining_and_leaving_a_drafting_batch_stay_exact(
    make_engine, tiny_chat_model: Path, tiny_draft_model: Path, draft: str
) -> None:
    """Rows join while others draft (the draft's batch cache grows) and leave at different
    steps (it shrinks), with different K and budgets: every output equals plain greedy, and
    a self-draft still accepts nearly everything (its cache rows stay in step)."""
    engine = make_engine()
    source = tiny_chat_model if draft == "self" else tiny_draft_model
    info = engine.load_model(tiny_chat_model, draft=source)
    prompts = _prompts(info, 8)
    budgets = [7, 30, 12, 25, 3, 18, 40, 9]
    plain = [
        _run(engine, info, [p], draft_kind=NONE, max_tokens=b, ignore_eos=True)[0]
        for p, b in zip(prompts, budgets, strict=True)
    ]
    streams = []
    for i, (p, b) in enumerate(zip(prompts, budgets, strict=True)):
        handle = engine.submit(request(info, p, max_tokens=b, num_draft_tokens=1 + i % 6))
        streams.append(iter(handle))
        if i % 3 == 2:
            streams[i] = itertools.chain([next(streams[i])], streams[i])  # others draft
    outputs = [[t for e in s if isinstance(e, TokenEvent) for t in e.token_ids] for s in streams]
    assert outputs == plain
    if draft == "self":
        assert _acceptance(engine) >= 0.9


@pytest.mark.parametrize("draft", ["self", "other"])
def test_sampled_histograms_with_model_drafts_match_the_target(
    make_engine, tiny_chat_model: Path, tiny_draft_model: Path, draft: str
) -> None:
    """Sampled rows drafting with the model (its argmax: a one-hot q) keep the target's law of
    the first tokens (the chi-square test of test_engine_speculative_sampling)."""
    from .test_engine_speculative_sampling import (
        _chi_square,
        _chi_square_critical,
        _samples,
        _target_law,
    )

    engine = make_engine(max_batch=32, max_queue=2000)
    source = tiny_chat_model if draft == "self" else tiny_draft_model
    info = engine.load_model(tiny_chat_model, draft=source)
    samples = _samples(engine, info, range(800), draft_kind=MODEL, num_draft_tokens=2)
    stat, df = _chi_square(samples, _target_law(tiny_chat_model))
    assert stat < _chi_square_critical(df), (stat, df)
    assert engine.stats().counters.draft_tokens_total > 0


def test_the_draft_unloads_with_its_model(make_engine, tiny_chat_model, tiny_draft_model) -> None:
    """Residency: the draft belongs to its model's entry; pushing the model out frees both."""
    import gc
    import weakref

    engine = make_engine(max_models=1)
    info = engine.load_model(tiny_chat_model, draft=tiny_draft_model)
    _run(engine, info, _prompts(info, 1), max_tokens=4, ignore_eos=True)
    entry = engine._models.get(info.name)
    assert entry is not None and entry.loaded.draft is not None
    draft = weakref.ref(entry.loaded.draft.model)
    del entry
    base = engine.load_model(tiny_chat_model, "other-name")
    _run(engine, base, _prompts(base, 1), max_tokens=4, ignore_eos=True)  # swaps the runner
    assert engine.stats().models_loaded == ("other-name",)
    gc.collect()
    assert draft() is None
