"""Prompt boundaries (chat/boundaries.py) on real tokenizers and templates: where the system
prompt, the history and a next turn part from the prompt, found from text renderings and one
stretch of tokens, equal to tokenizing every rendering whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mlxd.backend.mlx_lm.compat import load_tokenizer
from mlxd.chat import boundaries
from mlxd.chat.builder import build_chat_prompt
from mlxd.chat.messages import normalize_messages

CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
    [
        {"role": "system", "content": "You answer about the weather in Paris."},
        {"role": "user", "content": "Hello, how are you?"},
        {"role": "assistant", "content": " Fine, thanks."},
        {"role": "user", "content": "What is the weather <think> like?"},
    ],
    [
        {"role": "system", "content": "Tools are fine."},
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "<think>plan</think>Let me see.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 0 1 2 3."},
    ],
]  # fmt: skip


@pytest.mark.parametrize("kind", ["chat", "thinking", "base"])
def test_boundaries_equal_whole_tokenizations(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    path: Path = request.getfixturevalue(f"tiny_{kind}_model")
    tokenizer = load_tokenizer(path)
    fast = [build_chat_prompt(tokenizer, c) for c in CONVERSATIONS]

    whole = boundaries.PromptText.__init__

    def without_anchors(self: Any, text: str, ids: list[int], encode: Any, *_: Any) -> None:
        whole(self, text, ids, encode, None, frozenset())

    monkeypatch.setattr(boundaries.PromptText, "__init__", without_anchors)
    slow = [build_chat_prompt(tokenizer, c) for c in CONVERSATIONS]
    assert [p.boundaries for p in fast] == [p.boundaries for p in slow]
    for prompt, conversation in zip(fast, CONVERSATIONS, strict=True):
        b = prompt.boundaries
        assert 0 <= b.system <= b.next_turn <= prompt.prompt_tokens
        if conversation[0]["role"] == "system":
            assert b.system > 0
        if len(conversation) > 1:
            assert 0 < b.history < prompt.prompt_tokens


def test_each_boundary_is_where_that_conversation_departs(tiny_thinking_model: Path) -> None:
    tokenizer = load_tokenizer(tiny_thinking_model)
    first = CONVERSATIONS[2]
    prompt = build_chat_prompt(tokenizer, first)
    b = prompt.boundaries
    ids = prompt.token_ids
    answered = [*first, {"role": "assistant", "content": "<think>x</think> Cloudy."},
                {"role": "user", "content": "And tomorrow?"}]  # fmt: skip
    branch = [*first[:-1], {"role": "user", "content": "Something else"}]
    other = [{"role": "system", "content": first[0]["content"]},
             {"role": "user", "content": "Unrelated"}]  # fmt: skip
    for conversation, boundary in ((answered, b.next_turn), (branch, b.history), (other, b.system)):
        later = build_chat_prompt(tokenizer, normalize_messages(conversation)).token_ids
        assert later[:boundary] == ids[:boundary]
        assert boundary < len(ids)  # the thinking template's "<think>" is never shared
    assert ids[b.next_turn :] == tokenizer.encode("<think>\n", add_special_tokens=False)
