"""The real `mlxd serve` process driven by the official openai client's Responses API:
client.responses.create (streaming and not), function calls and their round trip, reasoning
items, max_output_tokens, and refusals in OpenAI's error shape."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mlxd.server.responses.schemas import MAX_ITEMS
from tests.e2e.server.conftest import THINK_SCRIPT, TRIP_ARGS
from tests.json_schemas import ANSWER_SCHEMA, ZONE_ARGS

QUESTION = "What is the capital of France?"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}

CLOCK = {
    "type": "function",
    "name": "get_time",
    "parameters": ZONE_ARGS,
}


def test_create_non_stream(client: openai.OpenAI, server) -> None:  # type: ignore[no-untyped-def]
    r = client.responses.create(model="default", input=QUESTION, max_output_tokens=8)
    assert r.object == "response" and r.id.startswith("resp_") and r.model == server.model
    assert r.status in ("completed", "incomplete")
    assert [i.type for i in r.output] == ["message"]
    assert r.output[0].content[0].type == "output_text"  # type: ignore[union-attr]
    assert r.output_text == r.output[0].content[0].text  # type: ignore[union-attr]
    assert r.usage is not None and r.usage.input_tokens > 0
    assert 1 <= r.usage.output_tokens <= 8
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_stream_equals_non_stream_under_greedy(client: openai.OpenAI) -> None:
    kw: dict[str, Any] = dict(model="default", input=QUESTION, max_output_tokens=12, temperature=0)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output_text == whole.output_text and final.status == whole.status
    # (the SDK's responses.stream() helper is exercised by the function-call tests: its
    # get_final_response() wants response.completed, and 12 tokens may end incomplete)


def test_max_output_tokens_makes_it_incomplete(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="default", input=QUESTION, max_output_tokens=3, extra_body={"ignore_eos": True}
    )
    assert r.status == "incomplete"
    assert r.incomplete_details is not None and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage is not None and r.usage.output_tokens == 3


def test_reasoning_and_function_call(client: openai.OpenAI) -> None:
    """'scripted' thinks, then calls get_weather: a reasoning item, then a function_call."""
    r = client.responses.create(model="scripted", input=QUESTION, tools=[WEATHER])
    assert [i.type for i in r.output] == ["reasoning", "function_call"]
    reasoning, call = r.output
    assert reasoning.content[0].text == "Let me see."  # type: ignore[union-attr,index]
    assert call.name == "get_weather" and call.call_id  # type: ignore[union-attr]
    assert json.loads(call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert r.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_usage_counts_the_reasoning_tokens(client: openai.OpenAI, stream: bool) -> None:
    """'scripted-think' reasons in 4 tokens between its markers, then answers: 9 output
    tokens (EOS included), 4 of them reasoning."""
    kw: dict[str, Any] = dict(model="scripted-think", input=QUESTION)
    if stream:
        events = list(client.responses.create(stream=True, **kw))
        r = events[-1].response  # type: ignore[union-attr]
    else:
        r = client.responses.create(**kw)
    assert r.output[0].content[0].text == "".join(THINK_SCRIPT[1:5])  # type: ignore[union-attr,index]
    assert r.usage is not None and r.usage.output_tokens == len(THINK_SCRIPT) + 1
    assert r.usage.output_tokens_details.reasoning_tokens == 4
    plain = client.responses.create(model="scripted-stop", input=QUESTION)
    assert plain.usage is not None and plain.usage.output_tokens_details.reasoning_tokens == 0


def test_function_call_round_trip(client: openai.OpenAI) -> None:
    """The output items go back as input, with the function's output."""
    first = client.responses.create(model="scripted", input=QUESTION, tools=[WEATHER])
    call = first.output[-1]
    history: list[Any] = [
        {"role": "user", "content": QUESTION},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"},  # type: ignore[union-attr]
    ]
    second = client.responses.create(model="scripted", input=history, tools=[WEATHER])
    assert second.output[-1].type == "function_call"  # the script calls again
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens


def test_streamed_function_call_arguments(client: openai.OpenAI) -> None:
    tools: list[Any] = [{"type": "function", "name": "plan_trip", "parameters": {"type": "object"}}]
    kw: dict[str, Any] = dict(model="scripted-trip", input=QUESTION, tools=tools)
    events = list(client.responses.create(**kw, stream=True))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads("".join(deltas)) == json.loads(done.arguments) == TRIP_ARGS
    with client.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == TRIP_ARGS


def test_tool_choice_none_hides_the_tools(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="scripted", input=QUESTION, tools=[WEATHER], tool_choice="none"
    )
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert "get_weather" in r.output_text


def test_instructions_are_the_system_message(client: openai.OpenAI) -> None:
    r = client.responses.create(
        model="default", instructions="Be brief.", input=QUESTION, max_output_tokens=1
    )
    chat = client.chat.completions.create(
        model="default",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": QUESTION},
        ],
        max_tokens=1,
    )
    assert r.usage is not None and chat.usage is not None
    assert r.usage.input_tokens == chat.usage.prompt_tokens


def test_forced_call_and_structured_output(client: openai.OpenAI) -> None:
    """tiny-chat's free output is gibberish; a forced call and a json_schema format are
    enforced by the grammar all the same (thinking off: reasoning is left free)."""
    kw: dict[str, Any] = dict(
        model="default", input=QUESTION, max_output_tokens=400, reasoning={"effort": "none"}
    )
    r = client.responses.create(
        **kw, tools=[WEATHER, CLOCK], tool_choice={"type": "function", "name": "get_time"}
    )
    (call,) = r.output
    assert call.type == "function_call" and call.name == "get_time"
    assert re.fullmatch("[A-Z]{3}", json.loads(call.arguments)["zone"])
    fmt = {"type": "json_schema", "name": "answer", "schema": ANSWER_SCHEMA, "strict": True}
    r = client.responses.create(**kw, text={"format": fmt})
    assert r.status == "completed" and r.text.format.type == "json_schema"  # type: ignore[union-attr]
    assert isinstance(json.loads(r.output_text)["answer"], int)
    r = client.responses.create(**kw, text={"format": {"type": "json_object"}})
    assert isinstance(json.loads(r.output_text), dict)


def test_reasoning_effort_none_turns_thinking_off(client: openai.OpenAI) -> None:
    """tiny-chat's template closes an empty think block when thinking is off (more tokens)."""
    kw: dict[str, Any] = dict(model="default", input=QUESTION, max_output_tokens=1)
    on = client.responses.create(**kw)
    off = client.responses.create(**kw, reasoning={"effort": "none"})
    assert off.usage.input_tokens > on.usage.input_tokens  # type: ignore[union-attr]


# ---- errors --------------------------------------------------------------------------

# (case id, body, status, expected param or None)
CASES: list[tuple[str, object, int, str | None]] = [
    ("missing-input", {"model": "default"}, 400, "input"),
    ("malformed-json", b'{"input": [', 400, None),
    (
        "previous-response",
        {"input": "x", "previous_response_id": "resp_1"},
        400,
        "previous_response_id",
    ),
    ("store", {"input": "x", "store": True}, 400, "store"),
    ("background", {"input": "x", "background": True}, 400, "background"),
    ("unknown-item", {"input": [{"type": "item_reference", "id": "x"}]}, 400, "input.0"),
    (
        "image-part",
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        400,
        None,
    ),
    (
        "orphan-output",
        {"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]},
        400,
        "input.0.call_id",
    ),
    (
        "bad-arguments",
        {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1"}]},
        400,
        "input.0.function_call.arguments",
    ),
    ("unknown-tool-type", {"input": "x", "tools": [{"type": "quantum_oracle"}]}, 400, None),
    ("xml-output", {"input": "x", "text": {"format": {"type": "xml"}}}, 400, "text.format.type"),
    (
        "schema-missing",
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "x"}}},
        400,
        None,
    ),
    ("max-output-zero", {"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
    ("temperature-bool", {"input": "x", "temperature": True}, 400, "temperature"),
    ("required-without-tools", {"input": "x", "tool_choice": "required"}, 400, None),
    ("unknown-model", {"input": "x", "model": "no-such-model"}, 404, "model"),
]


def test_grammar_errors_name_text_format(http: httpx.Client) -> None:
    fmt = {"format": {"type": "json_schema", "name": "a", "schema": {"type": "strin"}}}
    r = http.post("/responses", json={"input": "x", "text": fmt})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "text.format" and error["message"].startswith("text.format: ")


def test_a_too_long_input_list_is_described_as_one(http: httpx.Client) -> None:
    items = [{"role": "user", "content": "x"}] * (MAX_ITEMS + 1)
    r = http.post("/responses", json={"input": items})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and f"at most {MAX_ITEMS} items" in error["message"]
    assert "string" not in error["message"]


@pytest.mark.parametrize(
    ("body", "status", "param"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_gets_openai_errors(
    http: httpx.Client, body: object, status: int, param: str | None
) -> None:
    r = (
        http.post("/responses", content=body)
        if isinstance(body, bytes)
        else http.post("/responses", json=body)
    )
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param
    ok = http.post("/responses", json={"input": "hi", "max_output_tokens": 2})
    assert ok.status_code == 200 and ok.json()["object"] == "response"


def test_huge_body_is_413(http: httpx.Client) -> None:
    big = b'{"input":"' + b"a" * (5 << 20) + b'"}'
    r = http.post("/responses", content=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert http.post("/responses", json={"input": "hi", "max_output_tokens": 2}).status_code == 200


def test_refusals_say_why(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="no response state"):
        client.responses.create(model="default", input="x", previous_response_id="resp_1")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


CODEX = json.loads((Path(__file__).parent / "recordings" / "codex_0_171_default.json").read_text())[
    "request"
]


@pytest.mark.parametrize("stream", [True, False])
def test_codex_default_request_is_served(client: openai.OpenAI, stream: bool) -> None:
    """Codex 0.171's first request (its namespace, custom and hosted web_search tools; the
        recording says where its shape comes from), replayed through the SDK's Responses client
    (on tiny-long: the tiny tokenizer spells Codex's prompt in ~3.8k tokens)."""
    body = {**CODEX, "stream": stream, "max_output_tokens": 8, "model": "tiny-long"}
    known = {k: v for k, v in body.items() if k != "text"}
    if stream:
        with client.responses.create(**known, extra_body={"text": body["text"]}) as events:
            kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] in (
            "response.completed",
            "response.incomplete",
        )
    else:
        r = client.responses.create(**known, extra_body={"text": body["text"]})
        assert r.status in ("completed", "incomplete") and r.usage.input_tokens > 500
