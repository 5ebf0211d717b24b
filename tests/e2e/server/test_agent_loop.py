"""An agent loop through /v1/messages on a real `mlxd serve`: ten steps of a growing
conversation (a long system prompt, the model's tool calls, tool results) where every step
after the first reads at least the previous step's whole prompt from the prefix cache."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.e2e.server.serverproc import ServerProcess

STEPS = 10
SYSTEM = " ".join(
    f"Rule {i}: check the weather in the city the user names before you answer." for i in range(40)
)  # a long system prompt, like a coding agent's
WEATHER = {
    "name": "get_weather",
    "description": "Current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture(scope="module")
def claude(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def step(claude: anthropic.Anthropic, messages: list[Any], streamed: bool) -> Any:
    kw: dict[str, Any] = dict(
        model="scripted", max_tokens=64, system=SYSTEM, tools=[WEATHER], messages=messages
    )
    if not streamed:
        return claude.messages.create(**kw)
    with claude.messages.stream(**kw) as stream:  # usage arrives in message_delta
        return stream.get_final_message()


def test_every_step_reads_the_previous_prompt_from_the_cache(claude: anthropic.Anthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": "Plan a week in Paris."}]
    prompts: list[int] = []
    for n in range(STEPS):
        m = step(claude, messages, streamed=n % 2 == 1)
        assert m.stop_reason == "tool_use", m
        cached = m.usage.cache_read_input_tokens or 0
        prompt = m.usage.input_tokens + cached  # Anthropic's split: uncached + read from cache
        if prompts:
            assert prompt > prompts[-1]  # the conversation grew
            assert cached >= prompts[-1], f"step {n + 1}: {cached} cached < {prompts[-1]}"
        prompts.append(prompt)
        call = m.content[-1]
        messages += [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call.id,
                        "content": f"Day {n + 1}: sunny, {18 + n} C, light wind from the west.",
                    }
                ],
            },
        ]
    assert (
        claude.messages.count_tokens(
            model="scripted", system=SYSTEM, tools=[WEATHER], messages=messages
        ).input_tokens
        > prompts[-1]
    )
