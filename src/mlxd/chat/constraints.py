"""The output constraint a request asks for: a response_format, or a tool_choice that forces a
call written in the model's own tool-call format (pure Python;
mlxd.backend.structured.grammar compiles it).

    response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
                    -> JSON valid against the schema
    response_format {"type": "json_object"}  -> any JSON object
    tool_choice "required" / {"type": "function", "function": {"name": N}}
                    -> one call (of N) whose arguments are valid against its parameters,
                       e.g. Hermes: <tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>;
                       a model with no tool-call format writes the bare JSON object
                       (formats.GENERIC_JSON), the tools and that shape in its system prompt

A forced call wins over a response_format: the answer is then the call. Reasoning is left
free: the constraint starts after the model's reasoning block, whether the prompt opened it
or the model opens it with its first token (the turn cannot end inside it: the answer always
comes); a prompt that closed it (enable_thinking false) is answered at once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from mlxd.chat.formats import GENERIC_JSON, Formats, ToolFormat
from mlxd.chat.tool_syntax.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from mlxd.chat.tool_syntax.forced import call_choices
from mlxd.config import setting_int
from mlxd.errors import InvalidRequest
from mlxd.types import OutputConstraint

__all__ = [
    "JSON_OBJECT",
    "ToolCallShape",
    "chat_constraint",
    "forced_format",
    "generic_call_hint",
    "response_schema",
    "tool_call_shape",
]

JSON_OBJECT: dict[str, Any] = {"type": "object"}
_FORMAT_TYPES = ("text", "json_object", "json_schema")


def response_schema(raw: object) -> dict[str, Any] | None:
    """The JSON schema a response_format value asks for (None: free text). Raises
    InvalidRequest(param="response_format") on a malformed value."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or raw.get("type") not in _FORMAT_TYPES:
        raise _bad("must be {'type': 'text' | 'json_object' | 'json_schema', ...}")
    kind = raw["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        return dict(JSON_OBJECT)
    spec = raw.get("json_schema")
    if not isinstance(spec, Mapping):
        raise _bad("json_schema: an object with 'name' and 'schema' is required")
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise _bad("json_schema.name must be a string")
    if spec.get("strict") is not None and not isinstance(spec.get("strict"), bool):
        raise _bad("json_schema.strict must be true or false")
    schema = spec.get("schema")
    if isinstance(schema, bool) and schema:
        return {}  # `true`: any JSON value
    if not isinstance(schema, Mapping):
        raise _bad("json_schema.schema must be a JSON schema object")
    return dict(schema)


@dataclass(frozen=True, slots=True)
class ToolCallShape:
    """How one forced call is written in a tool format: text around the JSON, and the JSON."""

    prefix: str
    suffix: str
    arguments_key: str  # "arguments", or Llama 3's "parameters"
    as_list: bool  # Mistral: a list of calls
    name_key: str = "name"  # Command-R: "tool_name"
    # DeepSeek: the prefix writes the name ("{name}") and the JSON is the arguments alone, so
    # only a choice of one tool can be enforced.
    name_in_prefix: bool = False

    def fits(self, tools: list[dict[str, Any]]) -> bool:
        """Whether a call to one of `tools` can be enforced in this shape."""
        return not self.name_in_prefix or len(tools) == 1

    def opening(self, tools: list[dict[str, Any]]) -> str:
        """The text before the JSON (for `name_in_prefix`, with the one tool's name)."""
        if self.name_in_prefix:
            return self.prefix.replace("{name}", tools[0]["function"]["name"])
        return self.prefix

    def schema(self, tools: list[dict[str, Any]]) -> dict[str, Any]:
        if self.name_in_prefix:
            return dict(tools[0]["function"].get("parameters") or JSON_OBJECT)
        calls = [self._call(t["function"]) for t in tools]
        one: dict[str, Any] = calls[0] if len(calls) == 1 else {"anyOf": calls}
        if self.as_list:
            return {"type": "array", "items": one, "minItems": 1, "maxItems": 1}
        return one

    def _call(self, fn: Mapping[str, Any]) -> dict[str, Any]:
        params = fn.get("parameters") or JSON_OBJECT
        return {
            "type": "object",
            "properties": {self.name_key: {"const": fn["name"]}, self.arguments_key: params},
            "required": [self.name_key, self.arguments_key],
            "additionalProperties": False,
        }


# The tool formats a forced call can be written in (chat.formats detects them; their parsers
# read these shapes back). Others (mlx-lm's XML-like formats, Seed-OSS, pythonic calls, Gemma 4,
# GPT-OSS harmony, and DeepSeek with a choice of several tools) are one grammar choice per tool
# (tool_syntax.forced); a format with neither falls back to the prompt's instruction, warned.
_SHAPES = {
    "hermes": ToolCallShape("<tool_call>\n", "\n</tool_call>", "arguments", as_list=False),
    "mistral": ToolCallShape("[TOOL_CALLS]", "", "arguments", as_list=True),
    "llama3": ToolCallShape("", "", "parameters", as_list=False),
    "json": ToolCallShape("", "", "arguments", as_list=False),  # formats.GENERIC_JSON
    "phi4": ToolCallShape("<|tool_call|>", "<|/tool_call|>", "arguments", as_list=False),
    "nemotron": ToolCallShape("<TOOLCALL>", "</TOOLCALL>", "arguments", as_list=True),
    "granite": ToolCallShape("<|tool_call|>", "", "arguments", as_list=True),
    "command_r": ToolCallShape(
        "<|START_ACTION|>", "<|END_ACTION|>", "parameters", as_list=True, name_key="tool_name"
    ),
    "command_r_plus": ToolCallShape(
        "Action:\n```json\n", "\n```", "parameters", as_list=True, name_key="tool_name"
    ),
    "deepseek": ToolCallShape(
        f"{CALLS_BEGIN}{CALL_BEGIN}{{name}}{SEP}",
        f"{CALL_END}{CALLS_END}",
        "arguments",
        as_list=False,
        name_in_prefix=True,
    ),
}


def tool_call_shape(tool: ToolFormat | None) -> ToolCallShape | None:
    return _SHAPES.get(tool.name) if tool is not None else None


def forced_format(formats: Formats, forced: list[dict[str, Any]]) -> Formats:
    """The formats a forced call is written in: the model's own, or GENERIC_JSON for a
    model with no tool-call format (harmony models keep theirs)."""
    if forced and formats.tool is None and not formats.harmony:
        return replace(formats, tool=GENERIC_JSON)
    return formats


def generic_call_hint(forced: list[dict[str, Any]]) -> str:
    """The system prompt's instruction for GENERIC_JSON: the call's shape and the tools."""
    lines = [
        'Answer with exactly one JSON object {"name": TOOL, "arguments": {...}} that calls '
        "one of these tools, its arguments valid against the tool's parameters:"
    ]
    for tool in forced:
        fn = tool["function"]
        spec = {k: fn[k] for k in ("name", "description", "parameters") if k in fn}
        lines.append(json.dumps(spec, ensure_ascii=False))
    return "\n".join(lines)


def chat_constraint(
    formats: Formats,
    *,
    schema: dict[str, Any] | None,
    forced: list[dict[str, Any]],
    reasoning_open: bool,
    reasoning_closed: bool = False,
) -> tuple[OutputConstraint | None, str | None]:
    """(the constraint, a warning when a forced call cannot be enforced for this format).
    reasoning_closed: the prompt ends with a closed (empty) reasoning block."""
    markers = None if reasoning_closed else formats.reasoning
    if forced:
        constraint = _forced_call(formats, forced)
        if constraint is None:
            fmt = "GPT-OSS harmony" if formats.harmony else getattr(formats.tool, "name", "no")
            return (
                None,
                f"tool_choice is not enforced for the {fmt} tool-call format, only asked for",
            )
        return replace(constraint, reasoning=markers, reasoning_open=reasoning_open), None
    if schema is None:
        return None, None
    if formats.harmony:
        raise _bad("is not supported yet for GPT-OSS (harmony) models")
    text = _dump(schema, "response_format")
    return OutputConstraint(text, reasoning=markers, reasoning_open=reasoning_open), None


def _forced_call(formats: Formats, forced: list[dict[str, Any]]) -> OutputConstraint | None:
    """A call to one of `forced` in the model's syntax: one JSON value between markers, or
    one grammar choice per tool (XML-like syntaxes, DeepSeek, harmony); None: no grammar."""
    shape = tool_call_shape(formats.tool)
    if shape is not None and shape.fits(forced):
        text = _dump(shape.schema(forced), "tool_choice")
        prefix, suffix = shape.opening(forced), shape.suffix
        return OutputConstraint(text, param="tool_choice", prefix=prefix, suffix=suffix)
    syntax = "harmony" if formats.harmony else getattr(formats.tool, "name", "")
    choices = call_choices(syntax, forced, setting_int("grammar_string_chars"))
    if not choices:
        return None
    text = _dump({"anyOf": [t["function"].get("parameters") or {} for t in forced]}, "tool_choice")
    return OutputConstraint(text, param="tool_choice", choices=choices)


def _dump(schema: dict[str, Any], param: str) -> str:
    try:
        return json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        raise InvalidRequest(f"{param}: the schema is not valid JSON", param=param) from None


def _bad(rule: str) -> InvalidRequest:
    return InvalidRequest(f"response_format {rule}", param="response_format")
