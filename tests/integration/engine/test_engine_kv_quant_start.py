"""`--kv-quant-start N` (issue 30): quantized KV whose most recent N positions stay in full
precision, inside the continuous batch; real forwards on the medium float32 checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.backend.kv import BatchFullTailKVCache, RowFullTailKVCache, kv_quantization
from mlxd.backend.kv.full_tail import SPARE
from mlxd.types import DraftKind
from tests.checkpoints import make_checkpoint
from tests.integration.chat.scripted import make_scripted_checkpoint

from .engine_helpers import random_prompts, request
from .test_engine_kv_quant import GREEDY, SCRIPT, _agreed, _run


@pytest.fixture(scope="module")
def kv_chat_model(checkpoints_dir: Path) -> Path:
    return make_checkpoint(checkpoints_dir / "kv-chat", "chat", size="medium")


def test_a_tail_longer_than_every_sequence_equals_full_precision(make_engine, kv_chat_model):
    answers = []
    for bits, start in ((0, 0), (4, 4096)):
        engine = make_engine(kv_bits=bits, kv_quant_start=start, prefill_chunk=16)
        info = engine.load_model(kv_chat_model)
        answers.append(_run(engine, info, random_prompts(8, info.vocab_size, (5, 90), 1), **GREEDY))
    assert answers[0] == answers[1]


def test_the_tail_brings_4_bits_closer_to_full_precision(make_engine, kv_chat_model) -> None:
    # Measured on 16 prompts of 8-60 tokens (random weights, small logit margins): plain 4-bit
    # agrees with full precision on 0.56 of 16 tokens on average, with the last 16 positions
    # exact on 3.3.
    answers = []
    for bits, start in ((0, 0), (4, 0), (4, 16)):
        engine = make_engine(kv_bits=bits, kv_quant_start=start)
        info = engine.load_model(kv_chat_model)
        prompts = random_prompts(16, info.vocab_size, (8, 60), seed=0)
        answers.append(_run(engine, info, prompts, **GREEDY))
    plain = sum(_agreed(a, b) for a, b in zip(answers[0], answers[1], strict=True)) / 16
    tail = sum(_agreed(a, b) for a, b in zip(answers[0], answers[2], strict=True)) / 16
    assert tail >= 2 * plain + 1.0, (plain, tail)


def test_ngram_speculation_and_prefix_hits_under_a_tail(
    make_engine, kv_chat_model, verify_every_draft
) -> None:
    """Speculation leaves the answers unchanged; a snapshot keeps its tail, and a next turn
    served from it answers as one prefilled whole (a cut deeper than the spare positions is a
    miss: the same prompt again is prefilled again)."""
    engine = make_engine(kv_bits=8, kv_quant_start=20)
    info = engine.load_model(kv_chat_model)
    prompts = [[20 + 40 * i] * (25 + i) for i in range(8)]
    params = dict(max_tokens=32, ignore_eos=True)
    plain = _run(engine, info, prompts, **params)
    spec = _run(engine, info, prompts, draft_kind=DraftKind.NGRAM, num_draft_tokens=4, **params)
    assert spec == plain
    assert engine.stats().counters.prefix_cache_hits == 0
    turn = prompts[0] + plain[0] + [7, 8, 9]
    answer, fin = engine.submit(request(info, turn, **GREEDY)).collect()
    assert fin.usage.cached_tokens > 0
    cold = make_engine(kv_bits=8, kv_quant_start=20, prefix_cache_bytes=0)
    assert _run(cold, cold.load_model(kv_chat_model), [turn], **GREEDY) == [answer]


def test_accepted_and_rejected_drafts_under_a_tail(
    make_engine, checkpoints_dir, verify_every_draft
) -> None:
    """A scripted model (head dimension 128) accepts prompt-lookup drafts of its script with a
    4-position tail: the verify forward's queries each see their own exact window."""
    path = checkpoints_dir / "kv-scripted"
    if not path.exists():
        make_scripted_checkpoint(path, SCRIPT)
    engine = make_engine(kv_bits=8, kv_quant_start=4)
    info = engine.load_model(path)
    ids = [info.tokenizer.encode(chunk, add_special_tokens=False)[0] for chunk in SCRIPT]
    prompt = [7, ids[0], ids[1], ids[5], ids[6], 7, *ids, 7]
    got = _run(engine, info, [prompt], max_tokens=len(ids), draft_kind=DraftKind.NGRAM)
    assert got == [ids]
    counters = engine.stats().counters
    assert counters.accepted_tokens_total > 0


def test_the_footprint_counts_the_tail_as_a_window(make_engine, kv_chat_model) -> None:
    infos = {}
    for start in (0, 100):
        engine = make_engine(kv_bits=8, kv_group_size=64, kv_quant_start=start)
        infos[start] = engine.load_model(kv_chat_model)
    full = make_engine(kv_bits=0).load_model(kv_chat_model).kv
    quantized, tail = infos[0].kv, infos[100].kv
    assert tail.per_token == quantized.per_token
    window = 100 + SPARE  # rewinds keep the last 100 exact
    assert tail.windows == ((window, full.per_token),)
    assert tail.bytes_for(1000) == quantized.bytes_for(1000) + window * full.per_token


def test_the_model_caches_carry_the_tail(checkpoints_dir: Path, kv_chat_model) -> None:
    from mlx_lm.models.cache import make_prompt_cache

    from mlxd.backend.kv import quantize_kv
    from mlxd.backend.loader import load_checkpoint

    model = load_checkpoint(kv_chat_model, trust_remote_code=False).model
    quantize_kv(model, 8, 32, 64)
    layers = make_prompt_cache(model)
    assert all(isinstance(c, RowFullTailKVCache) and c.recent == 64 for c in layers)
    assert not hasattr(layers[0], "bits")  # mlx-lm's attention takes its float path
    assert kv_quantization(model) == (8, 32)
    assert isinstance(layers[0].merge([layers[0], layers[1]]), BatchFullTailKVCache)
