"""Agent frameworks' structured output against a real `mlxd serve`: pydantic-ai's default
output (a forced call of its `final_result` tool) through pydantic-ai itself, and
instructor's TOOLS mode as the request body instructor sends (instructor 1.17 cannot install
beside the pinned openai 3.51 and rich 15: it wants jiter<0.15 and rich<15). On a
random-weight checkpoint with no tool-call format (the grammar alone makes the object
valid) and on the demo model (`-m demo`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel, Field

from tests.e2e.server.serverproc import ServerProcess, launch, server_env


class City(BaseModel):
    """A city and the country it is in."""

    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population_millions: int = Field(description="population in millions, from 0 to 50")


def pydantic_ai_city(srv: ServerProcess) -> City:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=srv.base_url, api_key="unused")
    agent = Agent(OpenAIChatModel("default", provider=provider), output_type=City)
    result = agent.run_sync(
        "Which city is the capital of France?",
        model_settings={"max_tokens": 1500, "temperature": 0.0},
    )
    return result.output


def instructor_tools_city(srv: ServerProcess) -> City:
    """What instructor's Mode.TOOLS sends for `response_model=City` (instructor/processing:
    the model's schema as the one function, named and forced) and how it reads the answer."""
    client = openai.OpenAI(base_url=srv.base_url, api_key="unused", max_retries=0, timeout=600)
    schema = City.model_json_schema()
    fn = {"name": "City", "description": City.__doc__, "parameters": schema}
    r = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Which city is the capital of France?"}],
        tools=[{"type": "function", "function": fn}],
        tool_choice={"type": "function", "function": {"name": "City"}},
        max_tokens=1500,
        temperature=0,
    )
    assert r.choices[0].finish_reason == "tool_calls", r.choices[0]
    call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "City"  # type: ignore[union-attr]
    return City.model_validate(json.loads(call.function.arguments))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def plain_server(
    tiny_plain_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("agent-clients")
    srv = launch(["--model", str(tiny_plain_model)], server_env(home))
    yield srv
    srv.stop()


def test_pydantic_ai_and_instructor_get_a_valid_object(plain_server: ServerProcess) -> None:
    assert isinstance(pydantic_ai_city(plain_server), City)
    assert isinstance(instructor_tools_city(plain_server), City)


@pytest.mark.demo
def test_pydantic_ai_and_instructor_on_the_demo_model(tmp_path: Path) -> None:
    srv = launch([], server_env(tmp_path))
    try:
        assert isinstance(pydantic_ai_city(srv), City)
        assert isinstance(instructor_tools_city(srv), City)
    finally:
        srv.stop(timeout=120)


def litellm_answers(srv: ServerProcess) -> tuple[str, str, str]:
    """litellm's OpenAI-compatible route (`openai/NAME` with `api_base`), as its docs give it
    for a local server: a plain answer, the same streamed, and a forced call's tool name."""
    import os

    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no fetch of the price list at import
    import litellm

    ask = {
        "model": "openai/default",
        "api_base": srv.base_url,
        "api_key": "unused",
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 8,
        "temperature": 0.0,
    }
    plain = litellm.completion(**ask)
    streamed = "".join(
        chunk.choices[0].delta.content or "" for chunk in litellm.completion(**ask, stream=True)
    )
    fn = {"name": "City", "parameters": City.model_json_schema()}
    forced = litellm.completion(
        **{**ask, "max_tokens": 1500},
        tools=[{"type": "function", "function": fn}],
        tool_choice={"type": "function", "function": {"name": "City"}},
    )
    call = forced.choices[0].message.tool_calls[0]
    City.model_validate(json.loads(call.function.arguments))
    return plain.choices[0].message.content, streamed, call.function.name


def test_litellm_chat_streams_and_forced_calls(plain_server: ServerProcess) -> None:
    content, streamed, tool = litellm_answers(plain_server)
    assert content and content == streamed  # greedy: the stream assembles the same answer
    assert tool == "City"
