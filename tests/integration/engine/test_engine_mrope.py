"""Images on M-RoPE models (tiny Qwen2-VL, Qwen2.5-VL, Qwen3-VL) through the engine: each row's
position delta follows it through the batch, so greedy output alone == inside a batch of text
and other image requests == mlx-vlm's own single-request generation, token for token."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.images import data_url
from mlxd.chat.session import ChatStream, start_chat
from mlxd.engine import Engine, ModelInfo
from mlxd.types import FinishEvent, FinishReason
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_vision import answer, text_turn, uncached
from tests.vision_checkpoints import png_bytes

GREEDY = {"temperature": 0.0, "max_tokens": 12, "ignore_eos": True}
SIZES = {0: (56, 84), 1: (84, 56), 2: (70, 70), 3: (56, 56)}  # seed -> (width, height)


def recurrent(model: Path) -> bool:
    """Qwen3.5: gated delta-net layers beside attention. Its states cannot be cut back, so a
    later turn reuses only the snapshots the image prefill copied at the prompt's snapshot
    points (none holds the answer), and its rows do not speculate (mlx-vlm's
    layers are not the ones mlx_lm.recurrent_rollback knows); on the tiny checkpoint its
    answers hardly depend on the picture (mlx-vlm's own alike)."""
    return model.name == "tiny-qwen3_5"


def image_part(seed: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(png_bytes(seed, *SIZES[seed]))}}


def image_turn(*seeds: int, text: str = "What is in this picture?") -> list[dict[str, Any]]:
    parts = [*(image_part(s) for s in seeds), {"type": "text", "text": text}]
    return [{"role": "user", "content": parts}]


def ask(
    engine: Engine, info: ModelInfo, messages: list[dict[str, Any]], **options: Any
) -> tuple[str, FinishEvent]:
    return answer(start_chat(engine, info, chat_request(messages, {**GREEDY, **options})))


def two_turns(
    engine: Engine, info: ModelInfo, reply: str | None = None
) -> tuple[list[dict[str, Any]], str, FinishEvent]:
    """An image turn, its answer (or `reply`), then a second turn with another image: the
    messages, the second answer and its finish."""
    messages = image_turn(0)
    if reply is None:
        reply, _ = ask(engine, info, messages)
    messages += [{"role": "assistant", "content": reply}, *image_turn(1, text="And this one?")]
    second, finish = ask(engine, info, messages)
    return messages, second, finish


def mlx_vlm_tokens(model_path: Path, stream: ChatStream, seeds: list[int]) -> list[int]:
    """mlx-vlm's own single-request greedy generation on mlxd's rendered prompt (checked to
    tokenize to the same ids as mlxd's prompt): its first max_tokens token ids, fewer when
    it ends at an end-of-sequence token (mlxd's requests here ignore EOS)."""
    from mlx_vlm import load, stream_generate
    from mlx_vlm.utils import prepare_inputs
    from PIL import Image

    model, processor = load(str(model_path))
    images = [Image.open(io.BytesIO(png_bytes(s, *SIZES[s]))).convert("RGB") for s in seeds]
    inputs = prepare_inputs(processor, images=images, prompts=stream.prompt.text)
    assert inputs["input_ids"].flatten().tolist() == stream.prompt.token_ids
    steps = stream_generate(
        model, processor, stream.prompt.text, image=images, max_tokens=12, temperature=0.0
    )
    return [int(step.token) for step in steps][: GREEDY["max_tokens"]]


def assert_same_start(ours: list[int], theirs: list[int], info: ModelInfo) -> None:
    """mlx-vlm's tokens are ours, up to where it stopped (all 12, or an EOS)."""
    assert len(theirs) >= 3 and ours[: len(theirs)] == theirs
    assert len(theirs) == GREEDY["max_tokens"] or theirs[-1] in info.tokenizer.eos_token_ids


@pytest.fixture
def mrope(make_engine: EngineFactory, tiny_mrope_model: Path) -> tuple[Engine, ModelInfo]:
    return uncached(make_engine, tiny_mrope_model)


def test_an_image_request_answers_and_differs_by_image(mrope: tuple[Engine, ModelInfo]) -> None:
    engine, info = mrope
    first, finish = ask(engine, info, image_turn(0))
    second, _ = ask(engine, info, image_turn(1))
    assert finish.reason is FinishReason.LENGTH and finish.usage.completion_tokens == 12
    assert first != second or recurrent(info.path)


def test_alone_equals_inside_a_batch_of_eight(
    make_engine: EngineFactory, tiny_mrope_model: Path
) -> None:
    alone_engine, alone_info = uncached(make_engine, tiny_mrope_model, max_batch=1)
    requests = [image_turn(0), text_turn("Hello, how are you today?"), image_turn(1, 2)]
    requests += [text_turn("The capital of France is"), image_turn(3), text_turn("Hi")]
    requests += [text_turn("Numbers: 0 1 2 3"), image_turn(2)]
    alone = [ask(alone_engine, alone_info, messages)[0] for messages in requests]

    engine, info = uncached(make_engine, tiny_mrope_model, max_batch=8)
    streams = [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests]
    assert [answer(s)[0] for s in streams] == alone


def test_equals_mlx_vlm_generation_token_for_token(
    mrope: tuple[Engine, ModelInfo], tiny_mrope_model: Path
) -> None:
    engine, info = mrope
    for seeds in ([0], [1, 2]):
        stream = start_chat(engine, info, chat_request(image_turn(*seeds), GREEDY))
        ours, _ = stream.handle.collect()
        assert_same_start(ours, mlx_vlm_tokens(tiny_mrope_model, stream, seeds), info)


def test_images_in_two_turns_equal_mlx_vlm(
    mrope: tuple[Engine, ModelInfo], tiny_mrope_model: Path
) -> None:
    engine, info = mrope
    # A fixed first answer: the random model's own may hold bytes whose text does not
    # tokenize back to the same ids, which would test the tokenizer, not positions.
    messages, second, _ = two_turns(engine, info, reply="A small picture of noise.")
    stream = start_chat(engine, info, chat_request(messages, GREEDY))
    ours, _ = stream.handle.collect()
    assert info.tokenizer.decode(ours) == second
    assert_same_start(ours, mlx_vlm_tokens(tiny_mrope_model, stream, [0, 1]), info)


def test_second_turn_hits_the_prefix_cache_and_equals_a_cold_run(
    make_engine: EngineFactory, tiny_mrope_model: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_mrope_model)
    messages = image_turn(0)
    reply, first = ask(engine, info, messages)
    messages += [{"role": "assistant", "content": reply}, *text_turn("And the colours?")]
    warm, second = ask(engine, info, messages)
    again, third = ask(engine, info, image_turn(0))
    _, later, with_image = two_turns(engine, info)

    if not recurrent(tiny_mrope_model):
        assert second.usage.cached_tokens >= first.usage.prompt_tokens
        assert third.usage.cached_tokens == third.usage.prompt_tokens - 1
        assert with_image.usage.cached_tokens >= first.usage.prompt_tokens
    else:  # no cut back: the snapshot the image prefill copied before the prompt's last token
        assert second.usage.cached_tokens == first.usage.prompt_tokens - 1
        assert with_image.usage.cached_tokens >= first.usage.prompt_tokens - 1
    cold_engine, cold_info = uncached(make_engine, tiny_mrope_model)
    assert ask(cold_engine, cold_info, messages)[0] == warm
    assert ask(cold_engine, cold_info, image_turn(0))[0] == again == reply
    assert two_turns(cold_engine, cold_info)[1] == later


def test_quantized_kv_alone_equals_inside_a_batch(
    make_engine: EngineFactory, tiny_mrope_model: Path
) -> None:
    requests = [image_turn(1, 2), text_turn("Hello, how are you today?"), image_turn(0)]
    engine, info = uncached(make_engine, tiny_mrope_model, max_batch=1, kv_bits=8, kv_group_size=32)
    alone = [ask(engine, info, messages)[0] for messages in requests]
    engine, info = uncached(make_engine, tiny_mrope_model, max_batch=8, kv_bits=8, kv_group_size=32)
    streams = [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests]
    assert [answer(s)[0] for s in streams] == alone


@pytest.mark.usefixtures("verify_every_draft")
def test_speculating_rows_rewind_to_the_same_answers(
    make_engine: EngineFactory, tiny_mrope_model: Path
) -> None:
    """Prompt-lookup drafts on image and text rows in one batch: each verify step's rejected
    positions are trimmed (the offset moves, the row's delta stays), so every answer is the
    answer without speculation."""
    echo = "Say it again: " + " ".join(f"{w}{i}" for i in range(12) for w in ("ab", "cd", "ef"))
    requests = [image_turn(0, text=echo), text_turn(echo), image_turn(1, 2, text=echo)]
    requests += [image_turn(3), text_turn("Hi")]
    plain_engine, plain_info = uncached(make_engine, tiny_mrope_model)
    plain = [ask(plain_engine, plain_info, m)[0] for m in requests]
    engine, info = uncached(make_engine, tiny_mrope_model)
    drafting = {**GREEDY, "max_tokens": 64, "draft_kind": "ngram", "num_draft_tokens": 3}
    streams = [start_chat(engine, info, chat_request(m, drafting)) for m in requests[:3]]
    streams += [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests[3:]]
    answers = [answer(s)[0] for s in streams]
    assert engine.stats().counters.draft_tokens_total > 0 or recurrent(tiny_mrope_model)
    long_plain = [ask(plain_engine, plain_info, m, max_tokens=64)[0] for m in requests[:3]]
    assert answers == long_plain + plain[3:]


def test_a_cancelled_image_row_leaves_the_others_as_alone(
    make_engine: EngineFactory, tiny_mrope_model: Path
) -> None:
    requests = [image_turn(0), image_turn(1), text_turn("Hello there"), image_turn(2, 3)]
    alone_engine, alone_info = uncached(make_engine, tiny_mrope_model, max_batch=1)
    alone = [ask(alone_engine, alone_info, m)[0] for m in requests]
    engine, info = uncached(make_engine, tiny_mrope_model)
    streams = [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests]
    next(iter(streams[1]))  # decoding inside the batch
    streams[1].cancel()
    kept = [answer(s)[0] for i, s in enumerate(streams) if i != 1]
    assert kept == [a for i, a in enumerate(alone) if i != 1]
    late = start_chat(engine, info, chat_request(requests[1], GREEDY))  # joins after the drop
    assert answer(late)[0] == alone[1]
