"""The chat layer on the real SmolLM2-135M-Instruct demo model (slow: marked demo)."""

from __future__ import annotations

import pytest

from mlxd.chat.session import start_chat
from mlxd.types import FinishEvent, FinishReason, TextDelta
from tests.chat_requests import chat_request

pytestmark = pytest.mark.demo

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def demo(engine, demo_model):
    return engine.load_model(demo_model.path)


def _text(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_chat_demo_prompt_matches_transformers_and_answers_paris(engine, demo):
    stream = start_chat(engine, demo, chat_request(QUESTION, {"max_tokens": 24}))
    expected = demo.tokenizer._tokenizer.apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=False
    )
    assert stream.prompt.text == expected
    events = list(stream)
    assert "Paris" in _text(events)
    assert isinstance(events[-1], FinishEvent)
    assert events[-1].reason in (FinishReason.STOP, FinishReason.LENGTH)


def test_chat_demo_stop_string_is_never_emitted(engine, demo):
    events = list(
        start_chat(engine, demo, chat_request(QUESTION, {"max_tokens": 24, "stop": "Paris"}))
    )
    assert "Paris" not in _text(events)
    assert events[-1].reason == FinishReason.STOP
