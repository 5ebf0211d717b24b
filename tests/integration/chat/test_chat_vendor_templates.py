"""Vendors' real chat templates on scripted checkpoints (tests/vendor_templates.py): the prompt
renders as Hugging Face renders it, and each family's tool-call syntax becomes a ToolCall."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.filter import StreamFilter
from mlxd.chat.formats import detect_formats
from mlxd.chat.parser import merge_events, parse_output
from mlxd.chat.session import start_chat
from mlxd.types import FinishEvent, FinishReason, TextDelta, ToolCall, Usage
from tests.chat_requests import chat_request
from tests.integration.chat.scripted import make_scripted_checkpoint
from tests.vendor_templates import vendor_template

USER = [{"role": "user", "content": "What is the weather in Paris?"}]
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    *USER,
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ANSWER = ["Sunny", " in Paris."]
GLM_CALL = [
    "<tool_call>", "get_weather", "\n<arg_key>", "city", "</arg_key>", "\n<arg_value>", "Paris",
    "</arg_value>", "\n</tool_call>",
]  # fmt: skip
KIMI_CALL = [
    "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.get_weather:0",
    "<|tool_call_argument_begin|>", '{"city": "Paris"}', "<|tool_call_end|>",
    "<|tool_calls_section_end|>",
]  # fmt: skip


def _events(engine: Any, path: Path, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    info = engine.load_model(path)
    stream = start_chat(engine, info, chat_request(messages, **kwargs))
    events = list(stream)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [(c.name, json.loads(c.arguments)) for c in events if isinstance(c, ToolCall)]
    return stream.prompt.text, text, calls, events[-1]


@pytest.fixture(scope="module")
def answering(checkpoints_dir: Path) -> dict[str, Path]:
    """A checkpoint per template whose greedy output is ANSWER."""
    return {
        name: make_scripted_checkpoint(
            checkpoints_dir / f"vendor-{name}", ANSWER, template=vendor_template(name)
        )
        for name in ("LFM2.5-8B-A1B", "Phi-4-mini-instruct")
    }


@pytest.mark.parametrize("name", ["LFM2.5-8B-A1B", "Phi-4-mini-instruct"])
@pytest.mark.parametrize("tools", [None, TOOLS])
def test_vendor_template_plain_chat_renders_and_answers(engine, answering, name, tools):
    # LFM2.5 wraps assistant turns in {% generation %}; Phi-4-mini iterates `tools` when defined.
    prompt, text, calls, finish = _events(engine, answering[name], HISTORY, tools=tools)
    assert text == "Sunny in Paris." and calls == []
    assert finish.reason == FinishReason.STOP
    assert "Hello." in prompt and "Be brief." in prompt
    assert ("get_weather" in prompt) == (tools is not None)


def test_vendor_template_lfm2_generation_tag_renders_its_body(engine, answering):
    prompt = _events(engine, answering["LFM2.5-8B-A1B"], HISTORY)[0]
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n"
        "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    ("name", "script"), [("GLM-4.6", GLM_CALL), ("Kimi-K2", KIMI_CALL)], ids=["glm", "kimi"]
)
def test_vendor_template_tool_call_is_structured(engine, checkpoints_dir, name, script):
    # GLM: mlx-lm's glm47 parser, not Hermes JSON, for its <tool_call>; Kimi-K2 instruct: the
    # section tokens are only in the vocabulary.
    path = make_scripted_checkpoint(
        checkpoints_dir / f"vendor-{name}", script, template=vendor_template(name)
    )
    _, text, calls, finish = _events(engine, path, USER, tools=TOOLS)
    assert calls == [("get_weather", {"city": "Paris"})]
    assert text.strip() == "" and finish.reason == FinishReason.TOOL_CALLS
    tokenizer = engine.load_model(path).tokenizer
    ids = tokenizer.encode("".join(script), add_special_tokens=False)
    formats = detect_formats(tokenizer, tools=TOOLS)
    expected = parse_output("".join(script), formats, tools=True)
    streamed = StreamFilter(tokenizer, tools=TOOLS)
    events = [e for i in ids for e in streamed.feed([i])]
    events += streamed.finish(FinishEvent(FinishReason.STOP, Usage(1, len(ids))))
    one_shot = [(c.name, c.arguments) for c in merge_events(expected) if isinstance(c, ToolCall)]
    assert [(c.name, c.arguments) for c in events if isinstance(c, ToolCall)] == one_shot
    assert [(n, json.loads(a)) for n, a in one_shot] == calls
