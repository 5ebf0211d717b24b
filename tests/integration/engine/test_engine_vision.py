"""Images through the engine on the tiny llava checkpoint: batched with text requests,
greedy output alone == inside a batch, the image reaches the model, the prefix cache keys on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.images import data_url
from mlxd.chat.session import ChatStream, start_chat
from mlxd.engine import Engine, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import FinishEvent, FinishReason, TextDelta
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory
from tests.vision_checkpoints import IMAGE_POSITIONS, png_bytes

GREEDY = {"temperature": 0.0, "max_tokens": 16, "ignore_eos": True}


def image_turn(seed: int, text: str = "What is in this picture?") -> list[dict[str, Any]]:
    url = data_url(png_bytes(seed))
    parts = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]
    return [{"role": "user", "content": parts}]


def text_turn(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def answer(stream: ChatStream) -> tuple[str, FinishEvent]:
    text, finish = "", None
    for event in stream:
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, FinishEvent):
            finish = event
    assert finish is not None
    return text, finish


def uncached(make_engine: EngineFactory, model: Path, **options: Any) -> tuple[Engine, ModelInfo]:
    """An engine without a prefix cache (each answer computed afresh) and `model` on it."""
    engine = make_engine(prefix_cache_bytes=0, **options)
    return engine, engine.load_model(model)


def ask(engine: Engine, info: ModelInfo, messages: list[dict[str, Any]]) -> tuple[str, FinishEvent]:
    return answer(start_chat(engine, info, chat_request(messages, GREEDY)))


@pytest.fixture
def vision(make_engine: EngineFactory, tiny_vision_model: Path) -> tuple[Engine, ModelInfo]:
    return uncached(make_engine, tiny_vision_model)


def test_image_turn_alone_equals_inside_a_batch_of_text_requests(
    make_engine: EngineFactory, tiny_vision_model: Path
) -> None:
    alone_engine, alone_info = uncached(make_engine, tiny_vision_model, max_batch=1)
    seeds = (0, 1, 2, 3)  # with the 4 text requests: a batch of 8
    alone = [ask(alone_engine, alone_info, image_turn(seed))[0] for seed in seeds]

    engine, info = uncached(make_engine, tiny_vision_model, max_batch=8)
    texts = ["Hello, how are you today?", "The capital of France is", "Numbers: 0 1 2 3", "Hi"]
    streams = [start_chat(engine, info, chat_request(text_turn(t), GREEDY)) for t in texts[:2]]
    image_streams = [start_chat(engine, info, chat_request(image_turn(s), GREEDY)) for s in seeds]
    streams += [start_chat(engine, info, chat_request(text_turn(t), GREEDY)) for t in texts[2:]]
    batched = [answer(s)[0] for s in image_streams]
    text_answers = [answer(s) for s in streams]

    assert batched == alone
    assert all(finish.reason is FinishReason.LENGTH for _, finish in text_answers)


def test_different_images_give_different_answers(vision: tuple[Engine, ModelInfo]) -> None:
    engine, info = vision
    first, _ = ask(engine, info, image_turn(0))
    second, _ = ask(engine, info, image_turn(1))
    assert first != second


def test_prompt_tokens_count_each_images_positions(vision: tuple[Engine, ModelInfo]) -> None:
    engine, info = vision
    _, one = ask(engine, info, image_turn(0))
    two_images = image_turn(0)
    two_images[0]["content"].insert(0, dict(two_images[0]["content"][0]))
    _, two = ask(engine, info, two_images)
    assert two.usage.prompt_tokens - one.usage.prompt_tokens == IMAGE_POSITIONS + 1  # + "\n"


def test_prefix_cache_hits_the_same_image_and_misses_another(
    make_engine: EngineFactory, tiny_vision_model: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_vision_model)
    system = {"role": "system", "content": "You describe pictures. " * 6}
    cold, first = ask(engine, info, [system, *image_turn(0)])
    warm, again = ask(engine, info, [system, *image_turn(0)])
    stream = start_chat(engine, info, chat_request([system, *image_turn(1)], GREEDY))
    image_start = stream.prompt.token_ids.index(info.image_processor.image_token_id)
    other, miss = answer(stream)

    assert warm == cold
    assert again.usage.cached_tokens == again.usage.prompt_tokens - 1
    # Another image with the same text: only the text before the image is reused.
    assert miss.usage.cached_tokens == image_start > 0
    cold_engine, cold_info = uncached(make_engine, tiny_vision_model)
    assert ask(cold_engine, cold_info, [system, *image_turn(1)])[0] == other


def test_second_turn_after_an_image_prefills_only_its_new_tokens(
    make_engine: EngineFactory, tiny_vision_model: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_vision_model)
    messages = image_turn(3)
    reply, first = ask(engine, info, messages)
    messages += [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": "And the colours?"},
    ]
    second_reply, second = ask(engine, info, messages)
    assert second.usage.cached_tokens >= first.usage.prompt_tokens
    cold_engine, cold_info = uncached(make_engine, tiny_vision_model)
    assert ask(cold_engine, cold_info, messages)[0] == second_reply


def test_images_to_a_text_model_are_refused_before_queueing(
    make_engine: EngineFactory, tiny_chat_model: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(tiny_chat_model)
    with pytest.raises(InvalidRequest, match="text only") as refused:
        start_chat(engine, info, chat_request(image_turn(0), GREEDY))
    assert refused.value.param == "messages[0].content[0].image_url"
    assert ask(engine, info, text_turn("Hi"))[1].reason is FinishReason.LENGTH
