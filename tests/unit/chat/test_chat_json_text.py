"""loads_json: JSON from string fields parses as json.loads does, up to LIMITS["json_depth"]
levels; deeper text is a JSONDecodeError (JsonTooDeep) at any depth, never a RecursionError."""

from __future__ import annotations

import json

import pytest

from mlxd.chat.formats import HERMES, MISTRAL, Formats, parse_json_call
from mlxd.chat.json_text import JsonTooDeep, loads_json
from mlxd.chat.parser import OutputParser
from mlxd.config import LIMITS
from mlxd.types import TextDelta, ToolCall, Warning

LIMIT = LIMITS["json_depth"]


def nested(levels: int) -> str:
    return '{"a": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def test_values_up_to_the_limit_parse_as_json_loads_does() -> None:
    for text in [nested(LIMIT), '{"a": 1, "b": [1, {"c": null}]}', "[]", '"x"', "3"]:
        assert loads_json(text) == json.loads(text)
    wide = json.dumps([[i] for i in range(50_000)])  # many brackets, two levels
    assert loads_json(wide) == json.loads(wide)
    brackets_in_strings = json.dumps({"s": "[" * 5000})
    assert loads_json(brackets_in_strings) == {"s": "[" * 5000}


@pytest.mark.parametrize("levels", [LIMIT + 1, 1000, 100_000])
def test_deeper_values_are_a_decode_error(levels: int) -> None:
    with pytest.raises(json.JSONDecodeError) as err:
        loads_json(nested(levels))
    assert isinstance(err.value, JsonTooDeep) and f"deeper than {LIMIT}" in err.value.msg


def test_a_model_writing_a_deep_tool_call_gets_its_text_back_with_a_warning() -> None:
    body = '{"name": "f", "arguments": ' + nested(5000) + "}"
    with pytest.raises(ValueError, match="deeper than"):
        parse_json_call(body)
    for fmt, text in [
        (HERMES, f"<tool_call>{body}</tool_call>"),
        (MISTRAL, f"[TOOL_CALLS][{body}]"),
    ]:
        formats = Formats(reasoning=None, harmony=False, tool=fmt)
        parser = OutputParser(formats, tools=True, new_id=lambda: "id")
        events = parser.feed(text) + parser.flush()
        assert not any(isinstance(e, ToolCall) for e in events)
        assert any(isinstance(e, Warning) for e in events)
        assert body in "".join(e.text for e in events if isinstance(e, TextDelta))
