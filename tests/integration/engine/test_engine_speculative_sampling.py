"""Sampled rows with speculation (issue 14): the accept/resample rule keeps the target's
distribution (token histograms of real engine runs, with and without ngram drafts, against the
exact law of the first tokens: chi-square goodness of fit); seeded requests reproduce; every
emitted token's logprob is the target's at its position."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.utils import load_model

from mlxd.engine import Engine, ModelInfo
from mlxd.types import DraftKind, FinishEvent, TokenEvent
from tests.dflash_checkpoints import make_repeater_pair
from tests.mtp_checkpoints import make_successor_checkpoint

from .engine_helpers import request

# The drafting policy verifies every draft: these tests check the verify step itself.
pytestmark = pytest.mark.usefixtures("verify_every_draft")

NGRAM = DraftKind.NGRAM
TOP_K, TEMPERATURE = 3, 0.8
DEPTH = 3  # tokens per sample: the first comes from the prefill, drafts verify the next ones
# On the tiny chat checkpoint, after this prompt the first token is DRAFTED_AFTER with
# probability ~0.5; then the bigram (70, 164) matched earlier in the prompt drafts 57 first,
# which the target gives ~0.5 (test_the_prompt_makes_drafts_matter checks both): a broken rule
# (accepting every draft, or resampling from p instead of max(0, p - q)) shifts t2 far.
PROMPT = [70] * 12 + [164, 57] + [70] * 12
DRAFTED_AFTER, DRAFT = 164, 57
# After a run of one token the checkpoint loops: at a low temperature drafts keep coming and
# most are accepted, some rejected (seed 3: 8 of 14 accepted).
LOOP, LOOP_TEMPERATURE = [20] * 25, 0.3


def _target_law(path: Path) -> dict[tuple[int, ...], float]:
    """The exact law of the first DEPTH tokens of a top-k, tempered sampler after PROMPT,
    from one forward per prefix (the filters written here, not the engine's)."""
    model, _ = load_model(path)

    def next_probs(tokens: list[int]) -> dict[int, float]:
        logits = model(mx.array([tokens]))[0, -1].astype(mx.float32)
        lp = np.array(logits - mx.logsumexp(logits))
        top = np.argsort(-lp)[:TOP_K]
        w = np.exp((lp[top] - lp[top].max()) / TEMPERATURE)
        return dict(zip(top.tolist(), (w / w.sum()).tolist(), strict=True))

    law = {(): 1.0}
    for _ in range(DEPTH):
        law = {
            seq + (t,): p * q
            for seq, p in law.items()
            for t, q in next_probs(PROMPT + list(seq)).items()
        }
    return law


def _chi_square_critical(df: int) -> float:
    """The 0.999 quantile of chi-square with `df` degrees of freedom, by Wilson-Hilferty
    (within 2% of the exact quantile for df >= 3, 0.5% at df 12; z = 3.0902 is the normal
    0.999 quantile): scipy is not a dependency."""
    z = 3.0902
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def _chi_square(
    samples: list[tuple[int, ...]], law: dict[tuple[int, ...], float]
) -> tuple[float, int]:
    """Goodness of fit of `samples` to `law`: outcomes expected fewer than 5 times are pooled
    into one cell (so the chi-square approximation holds). Returns (statistic, df)."""
    n = len(samples)
    cells = [seq for seq, p in law.items() if n * p >= 5]
    rest = 1.0 - sum(law[c] for c in cells)
    seen = Counter(s if s in cells else None for s in samples)
    expected = [n * law[c] for c in cells] + ([n * rest] if n * rest >= 1e-9 else [])
    observed = [seen[c] for c in cells] + ([seen[None]] if len(expected) > len(cells) else [])
    assert sum(observed) == n, "a sampled sequence outside the top-k support"
    stat = sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))
    return stat, len(expected) - 1


def _samples(
    engine: Engine, info: ModelInfo, seeds: range, **params: object
) -> list[tuple[int, ...]]:
    handles = [
        engine.submit(
            request(
                info, PROMPT, max_tokens=DEPTH, ignore_eos=True, temperature=TEMPERATURE,
                top_k=TOP_K, seed=seed, **params,
            )
        )
        for seed in seeds
    ]  # fmt: skip
    return [tuple(h.collect()[0]) for h in handles]


@pytest.fixture(scope="module")
def law(tiny_chat_model: Path) -> dict[tuple[int, ...], float]:
    return _target_law(tiny_chat_model)


def test_the_prompt_makes_drafts_matter(law: dict[tuple[int, ...], float]) -> None:
    first = sum(p for seq, p in law.items() if seq[0] == DRAFTED_AFTER)
    accept = sum(p for seq, p in law.items() if seq[:2] == (DRAFTED_AFTER, DRAFT)) / first
    assert 0.3 < first < 0.8 and 0.3 < accept < 0.8


@pytest.mark.parametrize("kind", [NGRAM, DraftKind.MODEL, DraftKind.MTP, DraftKind.DFLASH])
def test_sampled_histograms_with_and_without_drafts_match_the_target(
    make_engine,
    tiny_chat_model: Path,
    tmp_path: Path,
    law: dict[tuple[int, ...], float],
    kind: DraftKind,
) -> None:
    """ngram drafts (about half the rows draft), the model as its own draft (its argmax:
    every row drafts, and the target gives that draft ~0.5 under top-k and temperature), and
    an MTP head that predicts its target's argmax (a one-hot q too), which the target draws
    about half the time (tests.mtp_checkpoints, spread), and likewise a DFlash drafter
    (tests.dflash_checkpoints, the repeater, spread)."""
    engine = make_engine(max_batch=32, max_queue=2000)
    draft = tiny_chat_model if kind is DraftKind.MODEL else None
    path = tiny_chat_model
    if kind is DraftKind.MTP:
        path = make_successor_checkpoint(tmp_path / "successor", spread=True)
        law = _target_law(path)
    if kind is DraftKind.DFLASH:
        path, draft = make_repeater_pair(tmp_path, spread=True)
        law = _target_law(path)
    info = engine.load_model(path, draft=draft)
    n = 800
    plain = _samples(engine, info, range(n), draft_kind=DraftKind.NONE)
    assert engine.stats().counters.draft_tokens_total == 0
    spec = _samples(engine, info, range(n, 2 * n), draft_kind=kind, num_draft_tokens=4)
    for samples in (plain, spec):
        stat, df = _chi_square(samples, law)
        assert stat < _chi_square_critical(df), (stat, df)
    stats = engine.stats()
    assert stats.counters.draft_tokens_total > n // 4
    assert 0 < stats.counters.accepted_tokens_total < stats.counters.draft_tokens_total


def _teacher_forced(path: Path, prompt: list[int], tokens: list[int]) -> list[float]:
    """The target's log-probability of each token after prompt + the tokens before it."""
    model, _ = load_model(path)
    logits = model(mx.array([prompt + tokens]))[0].astype(mx.float32)
    lp = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    start = len(prompt) - 1
    return [float(lp[start + i, t].item()) for i, t in enumerate(tokens)]


def test_seeded_speculation_reproduces_alone_and_in_a_batch(
    chat: tuple[Engine, ModelInfo],
) -> None:
    engine, info = chat
    spec = dict(draft_kind=NGRAM, num_draft_tokens=4, temperature=LOOP_TEMPERATURE, top_k=4)
    params = dict(max_tokens=30, ignore_eos=True)
    alone = engine.submit(request(info, LOOP, seed=3, **spec, **params)).collect()
    again = engine.submit(request(info, LOOP, seed=3, **spec, **params)).collect()
    assert alone[0] == again[0] and alone[1].timings.accepted_draft_tokens > 0
    others = [
        dict(seed=4, **spec),  # another seed: other tokens
        dict(temperature=0.0, draft_kind=NGRAM),  # greedy, speculating
        dict(temperature=0.9, seed=3),  # the same seed, no speculation
        dict(temperature=0.0, repetition_penalty=1.3, draft_kind=NGRAM),  # never drafts
    ]
    handles = [engine.submit(request(info, LOOP, **o, **params)) for o in others]
    batched = engine.submit(request(info, LOOP, seed=3, **spec, **params))
    outs = [h.collect() for h in handles]
    assert batched.collect()[0] == alone[0]
    assert outs[0][0] != alone[0]
    assert outs[3][1].timings.draft_tokens == 0  # a logits processor: no drafts


@pytest.mark.parametrize("temperature", [0.0, LOOP_TEMPERATURE])
def test_logprobs_are_the_targets_at_each_emitted_position(
    chat: tuple[Engine, ModelInfo], tiny_chat_model: Path, temperature: float
) -> None:
    engine, info = chat
    params = dict(max_tokens=30, ignore_eos=True, temperature=temperature, top_k=4, seed=3)
    params |= dict(logprobs=True, top_logprobs=2)
    handle = engine.submit(request(info, LOOP, draft_kind=NGRAM, num_draft_tokens=4, **params))
    events = list(handle)
    lps = [lp for e in events if isinstance(e, TokenEvent) for lp in e.logprobs]
    tokens = [lp.token_id for lp in lps]
    assert isinstance(events[-1], FinishEvent) and events[-1].timings.accepted_draft_tokens > 0
    expected = _teacher_forced(tiny_chat_model, LOOP, tokens)
    assert [lp.logprob for lp in lps] == pytest.approx(expected, abs=1e-4)
    assert all(lp.top[0][1] >= lp.logprob - 1e-6 for lp in lps)
    if temperature == 0.0:  # greedy: the very tokens and logprobs of a run without drafts
        plain = list(engine.submit(request(info, LOOP, **params)))
        ref = [lp for e in plain if isinstance(e, TokenEvent) for lp in e.logprobs]
        assert tokens == [lp.token_id for lp in ref]
        assert [lp.logprob for lp in lps] == pytest.approx([lp.logprob for lp in ref], abs=1e-4)
