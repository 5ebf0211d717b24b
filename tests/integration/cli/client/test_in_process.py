"""The CLI's engine plumbing in-process on a real tiny checkpoint: one batch-1 engine, the
chat layer's start_chat, the renderer; multi-turn REPL answers reuse the prefix cache."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from mlxd.chat.options import ChatOptions
from mlxd.chat.session import start_chat
from mlxd.cli.client.in_process import open_model, resolve_model
from mlxd.cli.repl import Conversation, Repl
from mlxd.cli.repl_input import PipeReader
from mlxd.cli.run import ask_once, messages_for
from tests.chat_requests import chat_request


def args(**overrides: object) -> argparse.Namespace:
    base = dict(no_stream=False, json=True, hide_reasoning=False, no_think=False)
    return argparse.Namespace(**(base | overrides))


@pytest.fixture
def loaded(tiny_chat_model: Path, isolated_home: Path):
    with open_model(resolve_model(str(tiny_chat_model))) as model:
        yield model
    assert not model.engine.health().ok  # the engine was closed on the way out


def test_batch_of_one_and_same_events_as_start_chat(loaded) -> None:
    assert loaded.engine.cfg.max_batch == 1
    messages = messages_for("What is the capital of France?", "Be brief.")
    options = {"max_tokens": 16, "temperature": 0.0}
    answer = ask_once(loaded, chat_request(messages, options), args())
    direct = "".join(
        getattr(e, "text", "")
        for e in start_chat(loaded.engine, loaded.info, chat_request(messages, options))
        if type(e).__name__ == "TextDelta"
    )
    assert answer.content == direct
    assert answer.finish is not None and answer.finish.usage.completion_tokens <= 16


def test_second_turn_is_served_from_the_prefix_cache(
    loaded, capsys: pytest.CaptureFixture[str]
) -> None:
    repl = Repl(loaded, Conversation(), ChatOptions(max_tokens=4), interactive=False)
    repl.loop(PipeReader(io.StringIO("Hello there\nAnd then?\n")))
    capsys.readouterr()
    assert repl.conv.answers == 2 and repl.conv.last is not None
    first_prompt = repl.conv.prompt_tokens - repl.conv.last.finish.usage.prompt_tokens
    usage = repl.conv.last.finish.usage
    assert usage.prompt_tokens > first_prompt
    assert usage.cached_tokens >= first_prompt  # at least the whole first prompt was reused
    assert loaded.engine.stats().counters.prefix_cache_hits >= 1
