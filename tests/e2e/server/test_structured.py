"""Structured output through the real `mlxd serve` on the tiny random checkpoint: the openai
client's `chat.completions.parse` with a pydantic model, JSON schema and JSON mode streamed and
not, forced tool calls, completions, and bad or hostile schemas refused with a 400."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from tests.json_schemas import check

USER = [{"role": "user", "content": "Give me a city as JSON."}]
# The tiny template then closes an empty <think> block: the answer starts at once (a random
# model given the choice opens reasoning half the time and rarely closes it).
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}


class Place(BaseModel):
    kind: Literal["city", "village"]
    population: int = Field(ge=0, le=10_000_000)
    capital: bool
    tags: list[Literal["old", "new", "big"]] = Field(max_length=3)


class Trip(BaseModel):
    name: str = Field(max_length=10)
    stops: list[Place] = Field(min_length=1, max_length=2)


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "rank": {"type": "integer", "minimum": 1, "maximum": 99},
        "sizes": {
            "type": "array",
            "items": {"type": "number", "minimum": 0, "maximum": 5},
            "maxItems": 3,
        },  # fmt: skip
    },
    "required": ["city", "rank", "sizes"],
    "additionalProperties": False,
}


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def test_parse_with_a_pydantic_model_round_trips(client: openai.OpenAI) -> None:
    done = client.chat.completions.parse(
        model="default", messages=USER, response_format=Trip, max_tokens=400, extra_body=NO_THINK
    )
    message = done.choices[0].message
    assert done.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Trip)
    assert Trip.model_validate_json(message.content or "") == message.parsed


def test_json_schema_streamed_equals_not_streamed(client: openai.OpenAI) -> None:
    kw: dict[str, Any] = dict(
        model="default", messages=USER, max_tokens=300, temperature=0, extra_body=NO_THINK,
        response_format=response_format(SCHEMA),
    )  # fmt: skip
    whole = client.chat.completions.create(**kw)
    content = whole.choices[0].message.content or ""
    check(json.loads(content), SCHEMA)
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert streamed == content and reasons == ["stop"] == [whole.choices[0].finish_reason]


def test_json_mode(client: openai.OpenAI) -> None:
    done = client.chat.completions.create(
        model="default", messages=USER, max_tokens=600, extra_body=NO_THINK,
        response_format={"type": "json_object"},
    )  # fmt: skip
    assert done.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(done.choices[0].message.content or ""), dict)


def test_max_tokens_cutting_the_json_is_length(client: openai.OpenAI) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 50}
    done = client.chat.completions.create(
        model="default", messages=USER, max_tokens=6, extra_body=NO_THINK,
        response_format=response_format(schema),
    )  # fmt: skip
    assert done.choices[0].finish_reason == "length"
    with pytest.raises(ValueError):
        json.loads(done.choices[0].message.content or "")


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 9},
                "unit": {"enum": ["c", "f"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_forced_tool_call(client: openai.OpenAI, stream: bool, choice: object) -> None:
    kw: dict[str, Any] = dict(
        model="default", messages=USER, max_tokens=200, tools=[WEATHER], tool_choice=choice,
        extra_body=NO_THINK,
    )  # fmt: skip
    if not stream:
        done = client.chat.completions.create(**kw)
        calls = done.choices[0].message.tool_calls or []
        assert done.choices[0].finish_reason == "tool_calls" and len(calls) == 1
        name, args = calls[0].function.name, calls[0].function.arguments  # type: ignore[union-attr]
    else:
        chunks = list(client.chat.completions.create(stream=True, **kw))
        deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        name = "".join(d.function.name or "" for d in deltas if d.function)
        args = "".join(d.function.arguments or "" for d in deltas if d.function)
        reasons = [
            c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
        ]
        assert reasons == ["tool_calls"]
    assert name == "get_weather"
    check(json.loads(args), WEATHER["function"]["parameters"])  # type: ignore[index]


def test_completions_take_a_response_format(client: openai.OpenAI) -> None:
    schema = {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 3}
    done = client.completions.create(
        model="default", prompt="List:", max_tokens=40,
        extra_body={"response_format": response_format(schema)},
    )  # fmt: skip
    assert done.choices[0].finish_reason == "stop"
    check(json.loads(done.choices[0].text), schema)


def deep(levels: int) -> str:
    """A schema nested `levels` objects deep, as JSON text."""
    return (
        '{"type": "object", "properties": {"a": ' * levels + '{"type": "integer"}' + "}}" * levels
    )


@pytest.mark.parametrize(
    "schema, param",
    [
        (json.dumps({"type": "strin"}), "response_format"),
        (json.dumps({"type": "string", "pattern": "("}), "response_format"),
        (json.dumps({"not": {"type": "integer"}}), "response_format"),
        (json.dumps({"enum": [f"value-{i}" for i in range(100_000)]}), "response_format"),
        (deep(70), "response_format"),  # parses as a body, too deep for the grammar
        (deep(400), None),  # too deep for the request body itself
    ],
    ids=["bad-type", "bad-pattern", "unsupported-not", "huge-enum", "deep", "deeper"],
)
def test_bad_and_hostile_schemas_are_400_and_the_next_request_works(
    http: httpx.Client, schema: str, param: str | None
) -> None:
    fmt = '{"type": "json_schema", "json_schema": {"name": "a", "schema": ' + schema + "}}"
    body = (
        '{"model": "default", "messages": ' + json.dumps(USER) + ', "response_format": ' + fmt + "}"
    )
    r = http.post("/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    ok = http.post(
        "/chat/completions",
        json={"model": "default", "messages": USER, "max_tokens": 30, **NO_THINK,
              "response_format": response_format({"enum": ["fine"]})},
    )  # fmt: skip
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == '"fine"'


def test_response_format_shape_errors_name_the_field(http: httpx.Client) -> None:
    for rf, where in [
        ({"type": "json_schema"}, "response_format"),
        ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "name"),
    ]:
        r = http.post("/chat/completions", json={"messages": USER, "response_format": rf})
        assert r.status_code == 400 and where in (r.json()["error"]["param"] or "")
