"""Gemma 3 with a sliding window shorter than the prompts (tests/vision_families.py, window 16):
the rotating layers wrap, and image turns still equal mlx-vlm's own generation and are the same
alone and batched; a text turn's next turn is served from the prefix cache (mlx-vlm's rotating
cache is a window, not a cache that cuts back anywhere) and equals a cache-off run, and so is
an image turn's (from the snapshots the image prefill copies at the prompt's snapshot points)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlxd.chat.session import start_chat
from tests.chat_requests import chat_request
from tests.integration.engine.conftest import EngineFactory
from tests.integration.engine.test_engine_vision import GREEDY, answer, text_turn, uncached
from tests.integration.engine.test_engine_vision_families import SIZES, image_part, turn
from tests.vision_families import make_family_checkpoint, with_sliding_window

WINDOW = 16


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_family_checkpoint("gemma3", tmp_path_factory.mktemp("gemma3-window"))
    return with_sliding_window(path, WINDOW)


def test_image_turns_past_the_window_alone_equal_batched(
    make_engine: EngineFactory, gemma3: Path
) -> None:
    requests = [[turn(image_part(seed, SIZES[seed % 2]))] for seed in range(3)]
    requests += [text_turn("The capital of France is Paris, and the quick brown fox jumps.")]
    alone_engine, alone_info = uncached(make_engine, gemma3, max_batch=1)
    alone = [
        answer(start_chat(alone_engine, alone_info, chat_request(m, GREEDY))) for m in requests
    ]
    assert all(finish.usage.prompt_tokens > WINDOW for _, finish in alone)
    engine, info = uncached(make_engine, gemma3, max_batch=8)
    streams = [start_chat(engine, info, chat_request(m, GREEDY)) for m in requests]
    assert [answer(s)[0] for s in streams] == [text for text, _ in alone]


def test_a_text_turn_past_the_window_is_served_from_the_cache(
    make_engine: EngineFactory, gemma3: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(gemma3)
    messages = text_turn("Tell me about the quick brown fox and the lazy dog, please.")
    reply, first = answer(start_chat(engine, info, chat_request(messages, GREEDY)))
    messages += [{"role": "assistant", "content": reply}, *text_turn("And the colours?")]
    second_reply, second = answer(start_chat(engine, info, chat_request(messages, GREEDY)))
    assert first.usage.prompt_tokens > WINDOW and second.usage.cached_tokens > WINDOW
    cold, cold_info = uncached(make_engine, gemma3)
    assert answer(start_chat(cold, cold_info, chat_request(messages, GREEDY)))[0] == second_reply


def test_an_image_turn_past_the_window_is_served_from_the_cache(
    make_engine: EngineFactory, gemma3: Path
) -> None:
    engine = make_engine()
    info = engine.load_model(gemma3)
    cold, cold_info = uncached(make_engine, gemma3)
    messages = [turn(image_part(3))]
    reply, earlier = answer(start_chat(engine, info, chat_request(messages, GREEDY)))
    for question in ("And the colours?", "And the shapes?"):
        messages += [{"role": "assistant", "content": reply}, turn(text=question)]
        reply, finish = answer(start_chat(engine, info, chat_request(messages, GREEDY)))
        # The whole earlier prompt but its last token: the window has wrapped, so the answer's
        # cache (which holds more than the next prompt shares) cannot be cut back to it.
        assert earlier.usage.prompt_tokens > WINDOW
        assert finish.usage.cached_tokens >= earlier.usage.prompt_tokens - 1
        assert answer(start_chat(cold, cold_info, chat_request(messages, GREEDY)))[0] == reply
        earlier = finish
