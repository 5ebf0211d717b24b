"""Reasoning controls on a real server with the official clients: Anthropic's thinking budget
and mlxd's max_reasoning_tokens end a model that reasons forever, which then answers;
reasoning_effort "none" turns thinking off through the template."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.server.serverproc import ServerProcess

USER = [{"role": "user", "content": "Capital of France?"}]


def thought(n: int) -> str:
    return "".join((["Hmm", " more"] * n)[:n])


@pytest.fixture(scope="module")
def anthropic_client(server: ServerProcess) -> Iterator[Any]:
    import anthropic

    with anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0) as c:
        yield c


def test_anthropic_thinking_budget_ends_the_thinking(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(
        model="scripted-ponder",
        max_tokens=64,
        thinking={"type": "enabled", "budget_tokens": 6},
        messages=USER,
    )
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == thought(6) and msg.content[1].text == "Paris."
    assert msg.stop_reason == "end_turn"


def test_anthropic_streamed_thinking_is_budgeted_too(anthropic_client: Any) -> None:
    with anthropic_client.messages.stream(
        model="scripted-ponder",
        max_tokens=64,
        thinking={"type": "enabled", "budget_tokens": 3},
        messages=USER,
    ) as stream:
        msg = stream.get_final_message()
    assert msg.content[0].thinking == thought(3) and msg.content[1].text == "Paris."


def test_without_a_budget_it_thinks_to_max_tokens(anthropic_client: Any) -> None:
    msg = anthropic_client.messages.create(model="scripted-ponder", max_tokens=20, messages=USER)
    assert msg.stop_reason == "max_tokens" and [b.type for b in msg.content] == ["thinking"]


def test_openai_max_reasoning_tokens_and_reasoning_effort(client: Any) -> None:
    answer = client.chat.completions.create(
        model="scripted-ponder", messages=USER, extra_body={"max_reasoning_tokens": 4}
    )
    message = answer.choices[0].message
    assert message.content == "Paris." and message.model_extra["reasoning_content"] == thought(4)
    off = client.chat.completions.create(
        model="scripted-ponder", messages=USER, reasoning_effort="none", max_tokens=1
    )
    low = client.chat.completions.create(
        model="scripted-ponder", messages=USER, reasoning_effort="low", max_tokens=1
    )
    # "none": enable_thinking false, so the template writes an empty <think></think> block.
    assert off.usage.prompt_tokens > low.usage.prompt_tokens == answer.usage.prompt_tokens
