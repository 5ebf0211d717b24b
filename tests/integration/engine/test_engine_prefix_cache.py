"""Prefix cache: turn N+1 of a chat prefills only its new tokens."""

from __future__ import annotations

from mlxd.types import FinishReason

from .engine_helpers import random_prompts, request


def test_second_turn_prefills_only_new_tokens(make_engine, tiny_chat_model) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    turn1, new = random_prompts(2, info.vocab_size, (30, 31), seed=15)
    answer1, fin1 = engine.submit(request(info, turn1, max_tokens=10, ignore_eos=True)).collect()
    assert fin1.usage.cached_tokens == 0
    before = engine.stats()
    turn2 = turn1 + answer1 + new[:7]
    answer2, fin2 = engine.submit(request(info, turn2, max_tokens=10, ignore_eos=True)).collect()
    after = engine.stats()
    assert fin2.usage.cached_tokens == len(turn1) + len(answer1) == 40
    assert fin2.usage.prompt_tokens == 47
    assert after.counters.prefilled_tokens_total - before.counters.prefilled_tokens_total == 7
    assert after.counters.prefix_cache_hits - before.counters.prefix_cache_hits == 1
    assert after.counters.cached_tokens_total - before.counters.cached_tokens_total == 40
    cold = make_engine(prefix_cache_bytes=0)
    cold.load_model(tiny_chat_model)
    cold_answer, cold_fin = cold.submit(
        request(info, turn2, max_tokens=10, ignore_eos=True)
    ).collect()
    assert cold_fin.usage.cached_tokens == 0
    assert answer2 == cold_answer  # reuse changes the cost, not the tokens


def test_identical_prompt_reuses_all_but_the_last_token(make_engine, tiny_chat_model) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    prompt = random_prompts(1, info.vocab_size, (20, 21), seed=16)[0]
    first = engine.submit(request(info, prompt, max_tokens=6, ignore_eos=True)).collect()
    second = engine.submit(request(info, prompt, max_tokens=6, ignore_eos=True)).collect()
    assert second[1].usage.cached_tokens == len(prompt) - 1
    assert second[0] == first[0]


def test_cache_is_bounded_in_bytes_and_keyed_by_model(
    make_engine, tiny_chat_model, tiny_base_model
) -> None:
    tiny = make_engine(prefix_cache_bytes=1)
    info = tiny.load_model(tiny_chat_model)
    prompt = random_prompts(1, info.vocab_size, (20, 21), seed=17)[0]
    for _ in range(2):
        _, fin = tiny.submit(request(info, prompt, max_tokens=4)).collect()
        assert fin.usage.cached_tokens == 0
    assert tiny.stats().cache.bytes <= 1

    engine = make_engine()
    chat_info = engine.load_model(tiny_chat_model)
    base_info = engine.load_model(tiny_base_model)
    engine.submit(request(chat_info, prompt, max_tokens=4)).collect()
    _, fin = engine.submit(request(base_info, prompt, max_tokens=4)).collect()
    assert fin.usage.cached_tokens == 0 and fin.reason in (FinishReason.STOP, FinishReason.LENGTH)
