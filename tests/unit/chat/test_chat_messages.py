"""Message, tool and chat_template_kwargs validation (OpenAI shapes) and the fallback format."""

from __future__ import annotations

import pytest

from mlxd.chat.builder import fallback_prompt
from mlxd.chat.messages import (
    check_template_kwargs,
    nine_char_call_ids,
    normalize_messages,
    normalize_tools,
)
from mlxd.errors import InvalidRequest

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_chat_messages_normalize_openai_shapes():
    msgs = normalize_messages(
        [
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        ]
    )
    assert msgs == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a\nb"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "id": "c1",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
    ]


def test_chat_messages_keep_assistant_reasoning_content():
    msgs = normalize_messages([{"role": "assistant", "content": "A", "reasoning_content": "R"}])
    assert msgs == [{"role": "assistant", "content": "A", "reasoning_content": "R"}]


BAD_MESSAGES = [
    (
        [{"role": "assistant", "content": "A", "reasoning_content": 1}],
        "messages[0].reasoning_content",
        "string",
    ),
    ([], "messages", "non-empty"),
    ("hi", "messages", "non-empty"),
    (["hi"], "messages[0]", "object"),
    ([{"role": "robot", "content": "x"}], "messages[0].role", "role must be"),
    ([{"role": "user"}], "messages[0].content", "required"),
    ([{"role": "user", "content": 5}], "messages[0].content", "string or a list"),
    (
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}],
        "messages[0].content[0]",
        "text or image_url",
    ),
    (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        "messages[0].content[0].image_url",
        "string 'url'",
    ),
    (
        [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        "messages[0].content[0]",
        "only user messages",
    ),
    (
        [{"role": "user", "content": [{"type": "text", "text": 1}]}],
        "messages[0].content[0].text",
        "string",
    ),
    (
        [{"role": "user", "content": "x"}, {"role": "tool", "content": "r"}],
        "messages[1].tool_call_id",
        "tool_call_id",
    ),
    ([{"role": "user", "content": "x", "tool_calls": []}], "messages[0]", "only assistant"),
    (
        [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}],
        "messages[0].tool_calls[0].function.arguments",
        "JSON object",
    ),
    (
        [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
        "messages[0].tool_calls[0]",
        "function.name",
    ),
    ([{"role": "user", "content": "x", "name": 3}], "messages[0].name", "string"),
]


@pytest.mark.parametrize(("messages", "param", "why"), BAD_MESSAGES)
def test_chat_messages_reject_bad_shapes_with_param(messages, param, why):
    with pytest.raises(InvalidRequest) as info:
        normalize_messages(messages)
    assert info.value.param == param
    assert why in info.value.message


def test_chat_messages_tools():
    assert normalize_tools(None) is None and normalize_tools([]) is None
    assert normalize_tools([TOOL]) == [TOOL]
    for bad, param in [
        ({"type": "function"}, "tools"),
        ([{"type": "retrieval"}], "tools[0]"),
        ([{"function": {"name": ""}}], "tools[0]"),
        ([{"function": {"name": "f", "parameters": []}}], "tools[0]"),
    ]:
        with pytest.raises(InvalidRequest) as info:
            normalize_tools(bad)
        assert info.value.param == param


def test_chat_messages_template_kwargs_allow_list():
    assert check_template_kwargs(None) == {}
    assert check_template_kwargs({"enable_thinking": False, "reasoning_effort": "low"}) == {
        "enable_thinking": False,
        "reasoning_effort": "low",
    }
    for bad in [
        {"chat_template": "x"},
        {"add_generation_prompt": False},
        {"tokenize": True},
        {"enable_thinking": {"nested": 1}},
    ]:
        with pytest.raises(InvalidRequest) as info:
            check_template_kwargs(bad)
        assert info.value.param.startswith("chat_template_kwargs")


def test_chat_messages_fallback_format():
    msgs = normalize_messages(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"},
            {"role": "tool", "tool_call_id": "c", "content": "T"},
        ]
    )
    assert fallback_prompt(msgs, None) == (
        "System: S\n\nUser: U\n\nAssistant: A\n\nTool (c): T\n\nAssistant:"
    )
    with_tools = fallback_prompt(msgs[1:2], normalize_tools([TOOL]))
    assert with_tools.startswith(
        'Tools (reply with JSON {"name": ..., "arguments": ...}):\n{"name": "get_weather"'
    )
    assert with_tools.endswith("User: U\n\nAssistant:")
    answered = normalize_messages([{"role": "user", "content": "U"},
                                   {"role": "assistant", "content": " Paris"}])  # fmt: skip
    assert fallback_prompt(answered, None) == "User: U\n\nAssistant: Paris\n\nAssistant:"


class _BosTokenizer:
    """Characters are tokens; BOS (id 1, text "<s>") is added when add_special_tokens."""

    bos_token = "<s>"
    chat_template = None

    def encode(self, text, add_special_tokens=True):
        body = [1] if text.startswith("<s>") else []
        body += [ord(c) for c in text.removeprefix("<s>")]
        return ([1] if add_special_tokens else []) + body


def test_chat_builder_text_prompt_adds_bos_once():
    from mlxd.chat.builder import build_chat_prompt, build_text_prompt

    tok = _BosTokenizer()
    assert build_text_prompt(tok, "hi").token_ids == [1, ord("h"), ord("i")]
    assert build_text_prompt(tok, "<s>hi").token_ids == [1, ord("h"), ord("i")]
    chat = build_chat_prompt(tok, [{"role": "user", "content": "x"}])  # the fallback adds BOS
    assert chat.text == "User: x\n\nAssistant:" and chat.token_ids[:2] == [1, ord("U")]


def test_call_ids_become_nine_alphanumerics_that_still_pair():
    # Mistral's templates demand 9-character ids; a call and its result keep one spelling.
    history = normalize_messages(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    for i in ("call_1", "call_0123456789abcdef", "abcdefghi")
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "1"},
            {"role": "tool", "tool_call_id": "call_0123456789abcdef", "content": "2"},
        ]
    )
    out = nine_char_call_ids(history)
    ids = [c["id"] for c in out[1]["tool_calls"]]
    assert ids[1:] == ["789abcdef", "abcdefghi"]
    assert all(len(i) == 9 and i.isalnum() for i in ids) and len(set(ids)) == 3
    assert [m["tool_call_id"] for m in out[2:]] == ids[:2]
    assert history[2]["tool_call_id"] == "call_1"  # the input is left as it was
