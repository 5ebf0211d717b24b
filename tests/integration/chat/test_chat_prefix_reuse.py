"""Prefix reuse through the chat layer on every cache kind: plain attention, a thinking
template that drops <think> from history, sliding-window (rotating) and hybrid recurrent
models. The client sends back exactly what it received; reuse changes the cost, never the
content (compared with a cache-less engine and with plain mlx-lm greedy)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm.generate import generate_step

from mlxd.chat.builder import BuiltPrompt
from mlxd.chat.filter import StreamFilter
from mlxd.chat.session import start_chat
from mlxd.engine import Engine, EngineConfig, ModelInfo
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, Usage
from tests.chat_requests import chat_request

KINDS = ["chat", "thinking", "sliding", "hybrid", "gated"]
NOT_TRIMMABLE = ["sliding", "hybrid", "gated"]
SYSTEM = (
    "You are a helpful assistant. The quick brown fox jumps over the lazy dog. "
    "Answer about the weather in Paris, in numbers: 0 1 2 3 4 5 6 7 8 9."
)
USERS = [
    "Hello, how are you today?",
    "What is the weather like in Paris?",
    "The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3",
]
MAX_TOKENS = 12


@dataclass
class Turn:
    prompt: BuiltPrompt
    content: str
    reasoning: str
    usage: Usage


def model_path(request: pytest.FixtureRequest, kind: str) -> Path:
    path: Path = request.getfixturevalue(f"tiny_{kind}_model")
    return path


@pytest.fixture
def engines() -> Any:
    made: list[Engine] = []

    def make(cache_bytes: int = 1 << 30, max_batch: int = 8) -> Engine:
        engine = Engine(
            EngineConfig.from_settings(max_batch=max_batch, prefix_cache_bytes=cache_bytes)
        )
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def ask(engine: Engine, info: ModelInfo, messages: list[dict[str, Any]]) -> Turn:
    stream = start_chat(
        engine, info, chat_request(messages, {"max_tokens": MAX_TOKENS, "temperature": 0.0})
    )
    return collect(stream)


def collect(stream: Any) -> Turn:
    events = list(stream)
    finish = events[-1]
    assert isinstance(finish, FinishEvent) and finish.reason is not FinishReason.ERROR
    return Turn(
        stream.prompt,
        "".join(e.text for e in events if isinstance(e, TextDelta)),
        "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
        finish.usage,
    )


def conversation(engine: Engine, info: ModelInfo, users: list[str]) -> list[Turn]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    turns = []
    for user in users:
        messages.append({"role": "user", "content": user})
        turn = ask(engine, info, messages)
        messages.append({"role": "assistant", "content": turn.content})  # sent back as is
        turns.append(turn)
    return turns


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def mlx_lm_answer(path: Path, info: ModelInfo, prompt: BuiltPrompt) -> tuple[str, str]:
    """Plain mlx-lm greedy on the same prompt ids, through the same (pure) stream filter."""
    model, _ = mlx_lm_load(str(path))
    ids: list[int] = []
    for token, _ in generate_step(mx.array(prompt.token_ids), model, max_tokens=MAX_TOKENS):
        ids.append(int(token))
        if token in info.tokenizer.eos_token_ids:
            break
    stream_filter = StreamFilter(info.tokenizer, reasoning_open=prompt.reasoning_open)
    events = stream_filter.feed(ids) + stream_filter.finish(FinishEvent(FinishReason.STOP, Usage()))
    return (
        "".join(e.text for e in events if isinstance(e, TextDelta)),
        "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
    )


@pytest.mark.parametrize("kind", KINDS)
def test_three_turns_reuse_the_previous_prompt_with_the_same_content(
    kind: str, request: pytest.FixtureRequest, engines: Any
) -> None:
    path = model_path(request, kind)
    engine = engines()
    info = engine.load_model(path)
    turns = conversation(engine, info, USERS)
    cold = engines(cache_bytes=0)
    cold_turns = conversation(cold, cold.load_model(path), USERS)

    assert turns[0].usage.cached_tokens == 0
    for before, turn in zip(turns, turns[1:], strict=False):
        previous = before.prompt.token_ids
        common = shared(previous, turn.prompt.token_ids)
        # ChatML history repeats the whole previous prompt; the thinking template drops the
        # "<think>\n" its generation prompt opened.
        assert common >= len(previous) - (2 if kind == "thinking" else 0)
        # At least the previous prompt, but for its last token, which must run again.
        assert turn.usage.cached_tokens >= min(common, len(previous) - 1)
    for turn, cold_turn in zip(turns, cold_turns, strict=True):
        assert (turn.content, turn.reasoning) == (cold_turn.content, cold_turn.reasoning)
        assert cold_turn.usage.cached_tokens == 0
        assert (turn.content, turn.reasoning) == mlx_lm_answer(path, info, turn.prompt)
    stats = engine.stats()
    assert (stats.counters.prefix_cache_hits, stats.counters.prefix_cache_misses) == (2, 1)
    assert stats.counters.cached_tokens_total == sum(t.usage.cached_tokens for t in turns)


@pytest.mark.parametrize("kind", ["chat", "sliding", "hybrid"])
def test_a_conversation_keeps_only_its_latest_turn(
    kind: str, request: pytest.FixtureRequest, engines: Any
) -> None:
    engine = engines()
    info = engine.load_model(model_path(request, kind))
    users = [f"{u} Turn {i}." for i, u in enumerate(USERS * 2)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    entries = []
    for user in users:
        messages.append({"role": "user", "content": user})
        turn = ask(engine, info, messages)
        messages.append({"role": "assistant", "content": turn.content})
        entries.append(engine.stats().cache.entries)
    stats = engine.stats()
    # At most: the system prompt, the last message's start, the prompt and the answer.
    assert max(entries) <= 4 and entries[-1] == entries[2]
    assert stats.cache.pruned > 0
    assert stats.cache.stored > stats.cache.entries


@pytest.mark.parametrize("kind", ["chat", "sliding", "hybrid"])
def test_branch_and_regenerate(kind: str, request: pytest.FixtureRequest, engines: Any) -> None:
    path = model_path(request, kind)
    engine = engines()
    info = engine.load_model(path)
    first = conversation(engine, info, USERS[:1])[0]
    history = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USERS[0]},
        {"role": "assistant", "content": first.content},
    ]
    asked = ask(engine, info, [*history, {"role": "user", "content": USERS[1]}])
    again = ask(engine, info, [*history, {"role": "user", "content": USERS[1]}])
    branch = ask(engine, info, [*history, {"role": "user", "content": USERS[2]}])

    cold = engines(cache_bytes=0)
    cold_info = cold.load_model(path)
    for turn in (asked, branch):
        messages = [*history, {"role": "user", "content": USERS[1 if turn is asked else 2]}]
        assert turn.content == ask(cold, cold_info, messages).content
    assert again.content == asked.content  # regenerate: greedy gives the same answer
    assert again.usage.cached_tokens == again.prompt.prompt_tokens - 1
    assert branch.prompt.boundaries.history > first.prompt.prompt_tokens
    assert branch.usage.cached_tokens >= branch.prompt.boundaries.history


@pytest.mark.parametrize("kind", ["chat", "sliding", "hybrid"])
def test_eight_concurrent_requests_share_one_system_prompt(
    kind: str, request: pytest.FixtureRequest, engines: Any
) -> None:
    path = model_path(request, kind)
    engine = engines()
    info = engine.load_model(path)
    questions = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{i} {u}"}]
                 for i, u in enumerate(USERS * 3)][:8]  # fmt: skip
    options = {"max_tokens": MAX_TOKENS, "temperature": 0.0}
    streams = [start_chat(engine, info, chat_request(m, options)) for m in questions]
    turns: list[Turn | None] = [None] * 8

    def consume(i: int) -> None:
        turns[i] = collect(streams[i])

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    done = [t for t in turns if t is not None]
    assert len(done) == 8
    system_end = done[0].prompt.boundaries.system
    assert system_end > 30
    assert sorted(t.usage.cached_tokens >= system_end for t in done) == [False] + [True] * 7

    cold = engines(cache_bytes=0)
    cold_info = cold.load_model(path)
    for turn, messages in zip(done, questions, strict=True):
        assert turn.content == ask(cold, cold_info, messages).content


@pytest.mark.parametrize("kind", ["chat", "hybrid"])
def test_a_small_budget_evicts_and_stays_within_bytes(
    kind: str, request: pytest.FixtureRequest, engines: Any
) -> None:
    path = model_path(request, kind)
    probe = engines()
    probe_info = probe.load_model(path)
    conversation(probe, probe_info, USERS[:1])
    one_turn = probe.stats().cache.bytes  # what one first turn keeps
    budget = one_turn * 2
    engine = engines(cache_bytes=budget)
    info = engine.load_model(path)
    cold = engines(cache_bytes=0)
    cold_info = cold.load_model(path)
    for i in range(4):
        users = [f"Conversation {i}: {USERS[i % 3]}", USERS[(i + 1) % 3]]
        turns = conversation(engine, info, users)
        assert [t.content for t in turns] == [
            t.content for t in conversation(cold, cold_info, users)
        ]
        assert turns[1].usage.cached_tokens > 0  # its own first turn is still there
        assert engine.stats().cache.bytes <= budget
    assert engine.stats().cache.evictions > 0


@pytest.mark.parametrize("kind", ["chat", "hybrid", "base"])  # base: the fallback format
def test_an_answer_sent_back_exactly_is_reused_with_its_leading_space(
    kind: str, request: pytest.FixtureRequest, engines: Any
) -> None:
    """`content` is the model's exact text: its first token's leading space included, so the
    answer a client sends back tokenizes to the generated ids and the next turn reuses them
    too (even where the cache cannot be cut back)."""
    engine = engines()
    info = engine.load_model(model_path(request, kind))
    (the,) = info.tokenizer.encode(" the", add_special_tokens=False)
    options = {"max_tokens": 6, "temperature": 0.0, "logit_bias": {str(the): 100}}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": USERS[0]},
    ]
    first = collect(start_chat(engine, info, chat_request(messages, options)))
    assert first.content == " the" * 6
    messages += [{"role": "assistant", "content": first.content}, {"role": "user", "content": "?"}]
    second = collect(start_chat(engine, info, chat_request(messages, options)))
    # The first prompt and the answer (all but its last token, which never ran).
    assert second.usage.cached_tokens >= first.prompt.prompt_tokens + 6 - 1
