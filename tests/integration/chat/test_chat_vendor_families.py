"""Every tool-calling family of tests/vendor_families.py through the chat layer, on scripted
checkpoints carrying the vendor's real template: answers come back clean, reasoning split,
one and two calls exact (token by token as in one piece), earlier calls and their results
rendered back into the template, and a forced tool_choice written in the family's syntax."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlxd.chat.filter import StreamFilter
from mlxd.chat.formats import detect_formats
from mlxd.chat.parser import merge_events, parse_output
from mlxd.chat.session import start_chat
from mlxd.types import FinishEvent, FinishReason, ReasoningDelta, TextDelta, ToolCall, Usage
from mlxd.types import Warning as ChatWarning
from tests.chat_requests import chat_request
from tests.vendor_families import (
    ANSWER,
    CALLS_ONE,
    CALLS_TWO,
    FAMILIES,
    THOUGHT,
    TIME,
    TOOLS,
    WEATHER,
    Family,
)
from tests.vendor_family import family_checkpoint

IDS = [f.name for f in FAMILIES]
USER = {"role": "user", "content": "What is the weather in Paris?"}


def _messages(family: Family, *rest: dict[str, Any]) -> list[dict[str, Any]]:
    system = {"role": "system", "content": "Be brief." + family.quiet_system}
    return [system, USER, *rest]


def _checkpoint(root: Path, family: Family, kind: str, script: list[str]) -> Path:
    return family_checkpoint(root / f"family-{family.name}-{kind}", family, kind, script)


def _run(engine: Any, path: Path, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    stream = start_chat(engine, engine.load_model(path), chat_request(messages, **kwargs))
    events = list(stream)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    calls = [(c.name, json.loads(c.arguments)) for c in events if isinstance(c, ToolCall)]
    warnings = [e.message for e in events if isinstance(e, ChatWarning)]
    return stream.prompt.text, text, reasoning, calls, events[-1], warnings


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_answer_is_clean_text(engine, checkpoints_dir, family):
    path = _checkpoint(checkpoints_dir, family, "answer", ANSWER)
    for tools in (None, TOOLS):
        _, text, reasoning, calls, finish, _ = _run(
            engine, path, _messages(family), tools=tools, template_kwargs=family.quiet_kwargs
        )
        assert (text, reasoning, calls) == ("Sunny in Paris.", "", [])
        assert finish.reason == FinishReason.STOP


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.thinking], ids=lambda f: f.name)
def test_family_reasoning_is_split_from_the_answer(engine, checkpoints_dir, family):
    path = _checkpoint(checkpoints_dir, family, "think", family.thinking)
    kwargs = family.thinking_kwargs
    _, text, reasoning, calls, finish, _ = _run(engine, path, [USER], template_kwargs=kwargs)
    assert (text, reasoning, calls) == ("Sunny.", THOUGHT, [])
    assert finish.reason == FinishReason.STOP


@pytest.mark.parametrize("two", [False, True], ids=["one-call", "two-calls"])
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_tool_calls_are_exact_streamed_or_whole(engine, checkpoints_dir, family, two):
    script = family.two_calls if two else family.one_call
    path = _checkpoint(checkpoints_dir, family, "two" if two else "one", script)
    _, text, reasoning, calls, finish, _ = _run(
        engine, path, _messages(family), tools=TOOLS, template_kwargs=family.quiet_kwargs
    )
    assert calls == (CALLS_TWO if two else CALLS_ONE)
    assert (text.strip(), reasoning) == ("", "")
    assert finish.reason == FinishReason.TOOL_CALLS
    tokenizer = engine.load_model(path).tokenizer
    formats = detect_formats(tokenizer, tools=TOOLS)
    if family.syntax == "harmony":
        assert formats.harmony and formats.tool is None
    else:
        assert formats.tool is not None and formats.tool.name == family.syntax
    # Token by token through the stream filter: the same calls as the whole text parsed once.
    ids = tokenizer.encode("".join(script), add_special_tokens=False)
    streamed = StreamFilter(tokenizer, tools=TOOLS)
    events = [e for i in ids for e in streamed.feed([i])]
    events += streamed.finish(FinishEvent(FinishReason.STOP, Usage(1, len(ids))))
    whole = merge_events(parse_output("".join(script), formats, tools=True))
    assert [(c.name, c.arguments) for c in events if isinstance(c, ToolCall)] == [
        (c.name, c.arguments) for c in whole if isinstance(c, ToolCall)
    ]


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_tool_result_turn_renders_into_the_template(engine, checkpoints_dir, family):
    kind = "answer" if family.result_lead is None else "result"
    path = _checkpoint(checkpoints_dir, family, kind, ANSWER)
    call = {"id": "call_1", "type": "function"}
    call["function"] = {"name": "get_weather", "arguments": json.dumps(WEATHER)}
    history = _messages(
        family,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
    )
    prompt, text, _, calls, finish, _ = _run(
        engine, path, history, tools=TOOLS, template_kwargs=family.quiet_kwargs
    )
    assert (text, calls, finish.reason) == ("Sunny in Paris.", [], FinishReason.STOP)
    assert '{"temp_c": 21}' in prompt or '"{\\"temp_c\\": 21}"' in prompt  # Phi-4: tojson
    if family.call_marker is not None:
        assert family.call_marker in prompt
        assert prompt.index(family.call_marker) < prompt.index("temp_c")


@pytest.mark.parametrize("named", [False, True], ids=["required", "named"])
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_forced_tool_choice(engine, checkpoints_dir, family, named):
    # The model would answer; a forced choice makes it call, in its family's syntax, where the
    # grammar can enforce it. Elsewhere the choice is asked for in the prompt, with a warning.
    path = _checkpoint(checkpoints_dir, family, "answer", ANSWER)
    choice: Any = {"type": "function", "function": {"name": "get_weather"}} if named else "required"
    _, text, _, calls, finish, warnings = _run(
        engine,
        path,
        _messages(family),
        tools=TOOLS,
        tool_choice=choice,
        template_kwargs=family.quiet_kwargs,
        options={"max_tokens": 200},
    )
    if family.enforced:
        assert len(calls) == 1 and finish.reason == FinishReason.TOOL_CALLS, (text, warnings)
        name, args = calls[0]
        assert name == "get_weather" or (not named and name == "get_time")
        assert set(args) == set(WEATHER if name == "get_weather" else TIME)
        assert text.strip() == ""
    else:
        assert any("not enforced" in w for w in warnings)
