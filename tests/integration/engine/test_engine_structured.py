"""Structured output on real forward passes: the tiny random checkpoint (whose free output is
gibberish) answers JSON that parses and validates against each schema, alone and inside a
batch with free requests whose greedy output stays byte-identical to running alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from mlxd.chat.options import ChatOptions
from mlxd.chat.session import ChatStream, start_chat, start_completion
from mlxd.engine import Engine, EngineConfig, ModelInfo
from mlxd.errors import InvalidRequest
from mlxd.types import FinishEvent, FinishReason, TextDelta, ToolCall
from tests.chat_requests import chat_request
from tests.json_schemas import OBJECT_SCHEMAS, SCHEMAS, check

USER = [{"role": "user", "content": "Describe a person as JSON."}]
NO_THINK = {"enable_thinking": False}  # the tiny template then closes an empty <think> block
BUDGET = 400  # tokens: far more than any bounded answer of SCHEMAS needs


@pytest.fixture(scope="module")
def tiny(tiny_chat_model: Path) -> Iterator[tuple[Engine, ModelInfo]]:
    engine = Engine(EngineConfig.from_settings(max_batch=8))
    yield engine, engine.load_model(tiny_chat_model)
    engine.close()


def fmt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def ask(engine: Engine, info: ModelInfo, options: dict[str, Any], **kwargs: Any) -> ChatStream:
    kwargs.setdefault("template_kwargs", NO_THINK)
    return start_chat(engine, info, chat_request(USER, options, **kwargs))


def answer(stream: ChatStream) -> tuple[str, FinishEvent, list[ToolCall]]:
    events = list(stream)
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    return text, finish, [e for e in events if isinstance(e, ToolCall)]


async def answer_async(stream: ChatStream) -> tuple[str, FinishEvent]:
    events = [e async for e in stream]
    assert isinstance(events[-1], FinishEvent)
    return "".join(e.text for e in events if isinstance(e, TextDelta)), events[-1]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS)
def test_every_constrained_answer_parses_and_validates(tiny, schema):
    engine, info = tiny
    text, finish, _ = answer(
        ask(engine, info, {"response_format": fmt(schema), "max_tokens": BUDGET})
    )
    assert finish.reason == FinishReason.STOP, (schema, text)
    check(json.loads(text), schema)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=OBJECT_SCHEMAS)
def test_streamed_answer_equals_the_collected_one(tiny, schema):
    engine, info = tiny
    options = {"response_format": fmt(schema), "max_tokens": BUDGET}
    text, finish, _ = answer(ask(engine, info, options))
    streamed, finish2 = asyncio.run(answer_async(ask(engine, info, options)))
    assert (streamed, finish2.reason) == (text, finish.reason) == (text, FinishReason.STOP)
    check(json.loads(streamed), schema)


def test_the_free_answer_is_not_json(tiny):
    # The control: without a constraint this checkpoint's answer does not parse.
    engine, info = tiny
    text, _, _ = answer(ask(engine, info, {"max_tokens": 40}))
    with pytest.raises(ValueError):
        json.loads(text)


def test_json_mode_answers_a_json_object(tiny):
    engine, info = tiny
    options = {"response_format": {"type": "json_object"}, "max_tokens": 600}
    text, finish, _ = answer(ask(engine, info, options))
    assert finish.reason == FinishReason.STOP
    assert isinstance(json.loads(text), dict)


def test_completion_endpoint_takes_a_response_format_too(tiny):
    engine, info = tiny
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
              "minItems": 2, "maxItems": 4}  # fmt: skip
    stream = start_completion(
        engine,
        info,
        "Numbers:",
        ChatOptions.parse({"response_format": fmt(schema), "max_tokens": 60}),
    )
    text, finish, _ = answer(stream)
    assert finish.reason == FinishReason.STOP
    check(json.loads(text), schema)


def test_max_tokens_cutting_the_answer_is_length(tiny):
    engine, info = tiny
    schema = {"type": "array", "items": {"enum": ["alpha", "beta"]}, "minItems": 30}
    text, finish, _ = answer(ask(engine, info, {"response_format": fmt(schema), "max_tokens": 9}))
    assert finish.reason == FinishReason.LENGTH
    assert finish.usage.completion_tokens == 9
    assert text.startswith('["') and "]" not in text


SCHEMA_A = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
SCHEMA_B = {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 5}


def test_constrained_and_free_requests_share_a_batch_of_8(tiny):
    """4 constrained + 4 free requests at once: every answer is byte-identical to the same
    request run alone, so the free ones are untouched by their constrained neighbours."""
    engine, info = tiny
    prompts = [f"Request {i}: {'tell me more ' * i}" for i in range(8)]
    requests = []
    for i, text in enumerate(prompts):
        options: dict[str, Any] = {"max_tokens": 48 if i % 2 else BUDGET}
        if i % 2 == 0:
            options["response_format"] = fmt(SCHEMA_A if i % 4 == 0 else SCHEMA_B)
        requests.append(([{"role": "user", "content": text}], options))

    def run(messages: list[dict[str, Any]], options: dict[str, Any]) -> ChatStream:
        return start_chat(engine, info, chat_request(messages, options, template_kwargs=NO_THINK))

    alone = [answer(run(*r))[:2] for r in requests]
    streams = [run(*r) for r in requests]  # all submitted before any is read: one batch
    together = [answer(s)[:2] for s in streams]
    for i, ((text_a, fin_a), (text_b, fin_b)) in enumerate(zip(alone, together, strict=True)):
        assert text_b == text_a, f"request {i} changed inside the batch"
        assert (
            fin_b.reason == fin_a.reason
            and fin_b.usage.completion_tokens == fin_a.usage.completion_tokens
        )
        if i % 2 == 0:
            check(json.loads(text_b), SCHEMA_A if i % 4 == 0 else SCHEMA_B)
    assert engine.stats().counters.requests_total >= 16


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["city", "days", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize(
    "choice, names",
    [
        ("required", {"get_weather", "get_time"}),
        ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
        ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"}),
    ],
)
@pytest.mark.parametrize("turn", range(3))
def test_forced_tool_call_is_always_a_valid_call(tiny, choice, names, turn):
    engine, info = tiny
    messages = [{"role": "user", "content": f"Question {turn}: what now?" * (turn + 1)}]
    stream = start_chat(
        engine,
        info,
        chat_request(
            messages,
            {"max_tokens": BUDGET},
            tools=[WEATHER, CLOCK],
            tool_choice=choice,
            template_kwargs=NO_THINK,
        ),
    )
    text, finish, calls = answer(stream)
    assert finish.reason == FinishReason.TOOL_CALLS and text == ""
    assert len(calls) == 1 and calls[0].name in names
    spec = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
    check(json.loads(calls[0].arguments), spec[calls[0].name])


def test_auto_tool_choice_is_not_forced(tiny):
    engine, info = tiny
    stream = start_chat(
        engine,
        info,
        chat_request(
            USER, {"max_tokens": 20}, tools=[WEATHER], tool_choice="auto", template_kwargs=NO_THINK
        ),
    )
    text, finish, calls = answer(stream)
    assert calls == [] and finish.reason == FinishReason.LENGTH and text


def test_a_bad_schema_is_refused_before_queueing_and_the_next_request_works(tiny):
    engine, info = tiny
    before = engine.stats().counters.requests_total
    for schema in ({"type": "strin"}, {"type": "string", "pattern": "(a"}, {"not": {}}):
        with pytest.raises(InvalidRequest) as err:
            ask(engine, info, {"response_format": fmt(schema)})
        assert err.value.param == "response_format"
    assert engine.stats().counters.requests_total == before  # nothing reached the engine
    text, finish, _ = answer(
        ask(engine, info, {"response_format": fmt(SCHEMA_B), "max_tokens": 40})
    )
    check(json.loads(text), SCHEMA_B)


def test_ignore_eos_cannot_be_combined_with_a_constraint(tiny):
    engine, info = tiny
    with pytest.raises(InvalidRequest) as err:
        ask(engine, info, {"response_format": fmt(SCHEMA_B), "ignore_eos": True})
    assert err.value.param == "ignore_eos"
