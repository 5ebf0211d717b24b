"""Wire schemas: strict numbers, bounds shared with the OPTIONS table, refusals, tool_choice."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mlxd.chat.messages import check_template_kwargs
from mlxd.chat.options import OPTIONS, OptionKind
from mlxd.config import LIMITS
from mlxd.errors import InvalidRequest
from mlxd.server.openai.schemas import ChatCompletionRequest, CompletionRequest
from mlxd.server.request_inputs import chat_request, parse
from mlxd.server.settings import ServerSettings

MSGS = [{"role": "user", "content": "hi"}]
BOUNDED = [
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "repetition_context_size",
    "presence_penalty",
    "frequency_penalty",
    "seed",
    "max_tokens",
]


def make(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": MSGS, **fields})


@pytest.mark.parametrize("name", BOUNDED)
def test_bounds_are_the_options_table(name: str) -> None:
    opt = OPTIONS[name]
    assert opt.bounds is not None
    is_int = opt.kind in (OptionKind.INT, OptionKind.SEED)
    lo, hi = opt.bounds.low, opt.bounds.high
    lo, hi = (int(lo), int(hi)) if is_int else (lo, hi)
    step = 1 if is_int else 1e-3
    make(**{name: lo + step if opt.bounds.low_open else lo})
    make(**{name: hi})
    for bad in (lo if opt.bounds.low_open else lo - step, hi + step):
        with pytest.raises(ValidationError) as e:
            make(**{name: bad})
        assert e.value.errors()[0]["loc"][0] == name


@pytest.mark.parametrize("name", BOUNDED)
@pytest.mark.parametrize("bad", [True, "1", [1], float("nan"), float("inf")])
def test_numbers_are_strict(name: str, bad: object) -> None:
    with pytest.raises(ValidationError):
        make(**{name: bad})


def test_ints_are_accepted_where_floats_are_expected() -> None:
    assert make(temperature=1).temperature == 1.0


def test_options_use_option_names() -> None:
    req = make(
        temperature=0.5,
        seed=3,
        stop="x",
        max_completion_tokens=7,
        logprobs=True,
        top_logprobs=2,
        logit_bias={"5": -1.0},
    )
    opts = req.options()
    assert set(opts) <= set(OPTIONS)
    assert opts == {
        "temperature": 0.5,
        "seed": 3,
        "stop": ["x"],
        "max_tokens": 7,
        "logprobs": True,
        "top_logprobs": 2,
        "logit_bias": {5: -1.0},
    }


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert make(max_tokens=9, max_completion_tokens=4).options()["max_tokens"] == 4


@pytest.mark.parametrize(
    "fields",
    [
        {"n": 2},
        {"response_format": {"type": "json_schema"}},
        {"messages": []},
        {"messages": [{"role": "narrator", "content": "x"}]},
        {"messages": [{"role": "user", "content": None}]},
        {"tool_choice": "required"},
        {
            "tools": [{"type": "function", "function": {"name": "a"}}],
            "tool_choice": {"type": "function", "function": {"name": "b"}},
        },
        {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
        {"stop": ""},
        {"stop": ["a" * 1000]},
        {"logit_bias": {"word": 1.0}},
    ],
)
def test_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ChatCompletionRequest.model_validate({"messages": MSGS, **fields})


def test_text_response_format_and_n_one_are_fine() -> None:
    make(n=1, response_format={"type": "text"})


def test_completion_prompt_forms() -> None:
    assert CompletionRequest.model_validate({"prompt": ["a"]}).prompt_text() == "a"
    for bad in (
        {"prompt": ["a", "b"]},
        {"prompt": [1, 2]},
        {"prompt": "a", "echo": True},
        {"prompt": "a", "suffix": "z"},
    ):
        with pytest.raises(ValidationError):
            CompletionRequest.model_validate(bad)
    assert CompletionRequest.model_validate({"prompt": "a", "logprobs": 2}).options() == {
        "logprobs": True,
        "top_logprobs": 2,
    }


def test_parse_names_the_field_and_counts_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLXD_MAX_STOP_STRINGS", "2")
    settings = ServerSettings()
    with pytest.raises(InvalidRequest) as e:
        parse(ChatCompletionRequest, b'{"messages": [{"role": "user"}]}', settings)
    assert e.value.param == "messages.0"
    with pytest.raises(InvalidRequest) as e:
        parse(ChatCompletionRequest, b'{"messages": [], "stop": ["a", "b", "c"]}', settings)
    assert e.value.param == "messages"
    body = b'{"messages": [{"role": "user", "content": "x"}], "stop": ["a", "b", "c"]}'
    with pytest.raises(InvalidRequest) as e:
        parse(ChatCompletionRequest, body, settings)
    assert e.value.param == "stop"
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        parse(ChatCompletionRequest, b"{", settings)


TOOLS = [
    {"type": "function", "function": {"name": "a"}},
    {"type": "function", "function": {"name": "b"}},
]


def chat_inputs(req: ChatCompletionRequest) -> tuple[Any, Any, Any]:
    """(messages, tools, template kwargs) as the chat layer hands them to the template."""
    request = chat_request(req, ServerSettings())
    messages, tools = request.tool_choice.apply(request.messages, request.tools)
    return messages, tools, request.template_kwargs


def test_tool_choice_none_hides_tools() -> None:
    _, tools, _ = chat_inputs(make(tools=TOOLS, tool_choice="none"))
    assert tools is None


def test_tool_choice_named_keeps_that_tool_and_says_so() -> None:
    req = make(
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "b"}},
        messages=[{"role": "system", "content": "Be brief."}, *MSGS],
    )
    messages, tools, _ = chat_inputs(req)
    assert [t["function"]["name"] for t in tools or []] == ["b"]
    assert messages[0]["role"] == "system" and "Be brief." in messages[0]["content"]
    assert "`b`" in messages[0]["content"]


def test_tool_choice_required_adds_a_system_message() -> None:
    messages, tools, _ = chat_inputs(make(tools=TOOLS, tool_choice="required"))
    assert messages[0]["role"] == "system" and tools is not None and len(tools) == 2


def test_template_kwargs_are_allow_listed() -> None:
    """The chat layer's allow-list (the CLI's too), one rule for every front door."""
    good = {"enable_thinking": False, "thinking_budget": 512}
    _, _, kwargs = chat_inputs(make(chat_template_kwargs=good))
    assert kwargs == good == check_template_kwargs(good)
    long = "x" * (LIMITS["template_kwarg_chars"] + 1)
    for bad in ({"tools": []}, {"enable_thinking": {"x": 1}}, {"reasoning_effort": long}):
        with pytest.raises(InvalidRequest):
            chat_inputs(make(chat_template_kwargs=bad))
        with pytest.raises(InvalidRequest):
            check_template_kwargs(bad)


def test_messages_reach_the_template_in_openai_shape() -> None:
    req = make(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": None,
                "reasoning": "hmm",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]
    )
    messages, _, _ = chat_inputs(req)
    assert messages[0] == {"role": "user", "content": "a\nb"}  # as the chat layer joins parts
    assert messages[1]["reasoning_content"] == "hmm"
    assert messages[1]["tool_calls"][0]["function"]["name"] == "f"
    assert messages[2] == {"role": "tool", "content": "42", "tool_call_id": "c1"}
