"""The mlx-lm internals mlxd relies on (backend/mlx_lm/compat.py), checked on the installed
mlx-lm. A failure here means an mlx-lm upgrade changed one of them: read each helper against
the new mlx-lm source, fix it, then update PINNED."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import StopSequences

from mlxd.backend.loader import load_checkpoint
from mlxd.backend.mlx_lm import compat
from mlxd.backend.mlx_lm import verify_step as spec_compat


def test_mlx_lm_is_the_version_the_helpers_were_checked_against() -> None:
    assert version("mlx-lm") == compat.PINNED, (
        "mlx-lm is not the pinned version: re-check backend/mlx_lm/compat.py, then PINNED"
    )


def waiting(gen: compat.BatchGen) -> list[int]:
    return [uid for uid, _ in compat.waiting_prompts(gen)]


def test_batch_generator_state_the_runner_reads_and_sets(tiny_chat_model: Path) -> None:
    model = load_checkpoint(tiny_chat_model).model
    gen = compat.new_batch_generator(
        model, completion_batch_size=4, prefill_batch_size=4, prefill_step_size=16
    )
    try:
        uids = gen.insert([[11] * 40, [12] * 5, [13] * 7], max_tokens=[3, 3, 3])
        assert list(compat.waiting_prompts(gen)) == list(zip(uids, [40, 5, 7], strict=True))
        assert compat.prompts_waiting(gen) and not compat.prefilling(gen)
        compat.limit_next_prefill(gen, 0)  # read again at every next(): nothing starts
        gen.next()
        assert waiting(gen) == uids and not compat.prefilling(gen)
        compat.limit_next_prefill(gen, 1)
        gen.next()
        assert waiting(gen) == uids[1:] and compat.prefilling(gen)  # 40 tokens, chunks of 16
        compat.limit_next_prefill(gen, 0)
        seen: list[int] = []
        for _ in range(10):
            if compat.first_token_due(gen):
                break
            seen += [g.uid for g in gen.next()[1]]
        assert compat.first_token_due(gen) and not compat.prefilling(gen) and not seen
        first = gen.next()[1]
        assert [g.uid for g in first] == [uids[0]] and not compat.first_token_due(gen)
        finished = [g for _ in range(5) for g in gen.next()[1] if g.finish_reason is not None]
        assert [(g.uid, g.finish_reason) for g in finished] == [(uids[0], "length")]
        done = finished[0]
        assert done.all_tokens is not None and len(done.all_tokens) == 40 + 3
        assert done.prompt_cache and all(isinstance(c.nbytes, int) for c in done.prompt_cache)
        assert compat.trim_cache(done.prompt_cache, 1) == 1
        assert set(gen.remove(uids[1:], return_prompt_caches=True)) == set(uids[1:])
        assert not compat.prompts_waiting(gen)
    finally:
        gen.close()


def test_logits_processor_calls_see_the_prompt_then_each_sampled_token(
    tiny_chat_model: Path,
) -> None:
    """GrammarMask's contract: call 1 ends with the prompt's last token, call n+1 with the
    token sampled after call n."""
    model = load_checkpoint(tiny_chat_model).model
    gen = compat.new_batch_generator(
        model, completion_batch_size=2, prefill_batch_size=2, prefill_step_size=16
    )
    seen: list[int] = []

    def record(tokens: mx.array, logits: mx.array) -> mx.array:
        seen.append(int(tokens[-1].item()))  # type: ignore[arg-type]
        return logits

    try:
        (uid,) = gen.insert([[11, 12, 13]], max_tokens=[5], logits_processors=[[record]])
        sampled = [g.token for _ in range(20) for g in gen.next()[1] if g.uid == uid]
        assert len(sampled) == 5
        assert seen[0] == 13  # the prompt's last token
        assert seen[1:] == sampled[: len(seen) - 1]  # then each token sampled before the call
        assert len(seen) >= 5
    finally:
        gen.close()


def test_segments_end_where_inserted_and_their_cache_is_the_prefix(tiny_hybrid_model: Path) -> None:
    """A segment end is reported once the cache holds exactly the tokens before it, and the
    cache extracted then continues like a fresh prefill of that prefix (a recurrent model)."""
    model = load_checkpoint(tiny_hybrid_model).model
    prompt = [(7 * i) % 300 + 10 for i in range(40)]
    gen = compat.new_batch_generator(
        model, completion_batch_size=2, prefill_batch_size=2, prefill_step_size=8
    )
    try:
        (uid,) = gen.insert_segments([[prompt[:13], prompt[13:]]], max_tokens=[4])
        assert list(compat.first_segments(gen, 1)) == [(uid, 13)]
        ends, snapshot, answer = [], None, []
        while len(answer) < 4:
            prefilled, generated = gen.next()
            for r in prefilled:
                if compat.segment_ended(r):
                    cache, tokens = gen.extract_cache([uid])[uid]
                    ends.append(len(tokens))
                    snapshot = snapshot or (cache, list(tokens))
            answer += [g.token for g in generated]
        assert ends == [13, 39]  # the inserted end, then the one before the last token
        assert snapshot is not None and snapshot[1] == prompt[:13]
        (again,) = gen.insert(
            [prompt[13:]], max_tokens=[4], caches=[snapshot[0]], all_tokens=[prompt[:13]]
        )
        resumed: list[int] = []
        while len(resumed) < 4:
            resumed += [g.token for g in gen.next()[1] if g.uid == again]
        assert resumed == answer
    finally:
        gen.close()


def test_streamed_text_keeps_the_first_tokens_leading_space(tiny_chat_model: Path) -> None:
    tokenizer = load_checkpoint(tiny_chat_model).tokenizer
    ids = tokenizer.encode(" the quick fox", add_special_tokens=False)
    detok = tokenizer.detokenizer
    for token in ids:
        detok.add_token(token)
    detok.finalize()
    assert detok.text == tokenizer.decode(ids) == " the quick fox"


def test_streamed_text_decodes_every_byte_token(tiny_chat_model: Path) -> None:
    """Byte 0's token (the byte-level alphabet's "\u0100") streams as "\x00", like decode."""
    tokenizer = load_checkpoint(tiny_chat_model).tokenizer
    ids = tokenizer.encode("a\x00b\x01 \x7f", add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids("\u0100") in ids
    detok = tokenizer.detokenizer
    streamed = ""
    for token in ids:
        detok.add_token(token)
        streamed += detok.last_segment
    detok.finalize()
    streamed += detok.last_segment
    assert streamed == detok.text == tokenizer.decode(ids) == "a\x00b\x01 \x7f"


def test_draft_batch_cache_rows_merge_grow_rewind_and_shrink(tiny_chat_model: Path) -> None:
    """The draft model's batch cache (speculation/draft_model.py): rows built from single-row
    caches, appended, rewound per row and filtered give each row's logits as a lone cache."""
    from mlx_lm.models.cache import make_prompt_cache

    model = load_checkpoint(tiny_chat_model).model
    prompts = [[11, 12, 13, 14, 15], [21, 22], [31, 32, 33, 34, 35, 36, 37]]

    def alone(tokens: list[int]) -> mx.array:
        logits: mx.array = model(mx.array([tokens]), cache=make_prompt_cache(model))
        return logits[0, -1]

    def lone(prompt: list[int]) -> compat.PromptCache:
        cache = make_prompt_cache(model)
        model(mx.array([prompt]), cache=cache)
        return cache

    cache = spec_compat.batch_rows([lone(p) for p in prompts[:2]])
    spec_compat.append_rows(cache, spec_compat.batch_rows([lone(prompts[2])]))
    model(mx.array([[1, 2, 3], [4, 0, 0], [5, 6, 0]]), cache=cache)  # padded feeds
    spec_compat.rewind_rows(cache, [3, 2, 1])  # row 0 keeps none, row 1 keeps 4, row 2 keeps 5, 6
    spec_compat.keep_rows(cache, [1, 2])
    logits = model(mx.array([[7], [8]]), cache=cache)[:, -1]
    expected = [alone([*prompts[1], 4, 7]), alone([*prompts[2], 5, 6, 8])]
    for got, want in zip(logits, expected, strict=True):
        assert mx.allclose(got, want, atol=1e-4).item()


def test_a_lone_row_steps_unmasked_with_the_same_tokens_and_masks_again_when_joined(
    tiny_chat_model: Path,
) -> None:
    """unmask_single_row's premises: a one-row generation batch has no left padding (also
    after a padded row left it), its caches then build no one-token mask, it gives the same
    greedy tokens as mlx-lm's masked step, and a joining row turns the masks back on."""
    model = load_checkpoint(tiny_chat_model).model
    short, long = [11, 12, 13], [21, 22, 23, 24, 25, 26, 27, 28, 29]

    def decode(unmask: bool) -> tuple[list[int], list[tuple[int, bool]]]:
        gen = compat.new_batch_generator(
            model, completion_batch_size=4, prefill_batch_size=4, prefill_step_size=16
        )
        try:
            (keep, _) = gen.insert([short, long], max_tokens=[24, 2])  # prefilled padded
            tokens: list[int] = []
            seen: list[tuple[int, bool]] = []  # (rows decoding, no one-token mask) per step
            while len(tokens) < 24:
                if len(tokens) == 10:  # a row joins, decodes 3 tokens and leaves
                    gen.insert([[31, 32]], max_tokens=[3])
                if unmask:
                    compat.unmask_single_row(gen)
                batch = gen._generation_batch
                if batch.uids:
                    layer = batch.prompt_cache[0]
                    if len(batch.uids) == 1:
                        assert layer.left_padding.tolist() == [0]
                    seen.append((len(batch.uids), layer.make_mask(1) is None))
                tokens += [g.token for g in gen.next()[1] if g.uid == keep]
            return tokens, seen
        finally:
            gen.close()

    masked, seen = decode(unmask=False)
    assert not any(unmasked for _, unmasked in seen)
    unmasked, seen = decode(unmask=True)
    assert unmasked == masked
    assert all(unmasked == (rows == 1) for rows, unmasked in seen)
    rows = [r for r, _ in seen]
    assert rows[0] == 2 and 1 in rows and rows.index(1) < rows.index(2, rows.index(1))
    assert rows[-1] == 1  # alone again after the joined row left


def test_next_step_decodes_as_next_does_and_prefills_through_it(tiny_chat_model: Path) -> None:
    """next_step's premises: with no prompt waiting or being prefilled, `next()` only runs
    the decode step and its counters, so the decode-only path gives the same tokens, finish
    reasons and final caches, lone row or several, with a row joining mid-stream (prefilled
    through `next()`) and rows ending by `length` and `stop`."""
    model = load_checkpoint(tiny_chat_model).model

    def decode(fast: bool) -> tuple[list[tuple[int, int, str | None]], list[int], int]:
        gen = compat.new_batch_generator(
            model, completion_batch_size=4, prefill_batch_size=4, prefill_step_size=16
        )
        try:
            first = gen.insert([[11, 12, 13]], max_tokens=[20])[0]
            events: list[tuple[int, int, str | None]] = []
            cached: list[int] = []
            for step in range(30):
                if step == 6:  # a row joins, with a stop token it is bound to meet
                    stops = [StopSequences([[t] for t in range(model.args.vocab_size)])]
                    gen.insert([[21, 22, 23, 24]], max_tokens=[8], stop_sequences=stops)
                _, out = compat.next_step(gen) if fast else gen.next()
                for g in out:
                    events.append((g.uid - first, g.token, g.finish_reason))
                    if g.finish_reason and g.prompt_cache:
                        cached.append(sum(c.nbytes for c in g.prompt_cache))
            return events, cached, gen._counters.generation_tokens
        finally:
            gen.close()

    slow, fast = decode(fast=False), decode(fast=True)
    assert fast == slow
    events, cached, counted = fast
    assert [(uid, reason) for uid, _, reason in events if reason] == [(1, "stop"), (0, "length")]
    assert len(cached) == 2 and counted == len(events) == 20 + 1
