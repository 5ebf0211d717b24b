"""Which constraint a request asks for (chat.constraints): response_format values, forced tool
choices, and forced calls written so that each format's own parser reads them back."""

from __future__ import annotations

import json

import pytest

from mlxd.chat.constraints import (
    chat_constraint,
    response_schema,
    tool_call_shape,
)
from mlxd.chat.formats import (
    HERMES,
    LLAMA3,
    MISTRAL,
    THINK,
    Formats,
    ToolFormat,
    detect_formats,
)
from mlxd.chat.tool_choice import NAMED_HINT, REQUIRED_HINT, ToolChoice
from mlxd.chat.tool_syntax.families import SYNTAXES, Syntax
from mlxd.chat.tool_syntax.forced import call_choices
from mlxd.errors import InvalidRequest
from mlxd.types import GrammarPiece, PieceKind
from tests.unit.chat.test_chat_formats import Tok

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}
TOOLS = [
    {"type": "function", "function": {"name": "f", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "g"}},
]


def test_response_schema_of_each_format_type():
    assert response_schema(None) is None
    assert response_schema({"type": "text"}) is None
    assert response_schema({"type": "json_object"}) == {"type": "object"}
    value = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}}
    assert response_schema(value) == SCHEMA
    assert response_schema({"type": "json_schema", "json_schema": {"schema": True}}) == {}


@pytest.mark.parametrize(
    "value",
    [
        "json",
        {"type": "xml"},
        {"type": "json_schema"},
        {"type": "json_schema", "json_schema": {"name": "x"}},
        {"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}},
        {"type": "json_schema", "json_schema": {"name": 3, "schema": SCHEMA}},
        {"type": "json_schema", "json_schema": {"schema": SCHEMA, "strict": "yes"}},
        {"type": "json_schema", "json_schema": {"schema": False}},
    ],
)
def test_malformed_response_formats_are_refused(value):
    with pytest.raises(InvalidRequest) as err:
        response_schema(value)
    assert err.value.param == "response_format"


def test_forced_tool_choices():
    auto, none = ToolChoice.parse(None), ToolChoice.parse("none")
    assert auto == ToolChoice.parse("auto") == ToolChoice()
    assert auto.forced(TOOLS) == none.forced(TOOLS) == []
    assert ToolChoice.parse("required").forced(TOOLS) == TOOLS
    named = {"type": "function", "function": {"name": "g"}}
    assert ToolChoice.parse(named) == ToolChoice.named("g")
    assert ToolChoice.named("g").forced(TOOLS) == [TOOLS[1]]
    assert ToolChoice.parse(ToolChoice.named("g").wire()) == ToolChoice.named("g")
    for bad, tools in [
        ("required", None),
        ({"type": "function", "function": {"name": "h"}}, TOOLS),
        ({"type": "function"}, TOOLS),
        ("always", TOOLS),
    ]:
        with pytest.raises(InvalidRequest) as err:
            ToolChoice.parse(bad).forced(tools)
        assert err.value.param == "tool_choice"


def test_a_tool_choice_shapes_the_prompt_without_touching_the_callers_messages():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    shown, tools = ToolChoice.named("g").apply(messages, TOOLS)
    assert (
        tools == [TOOLS[1]] and shown[0]["content"] == f"Be brief.\n\n{NAMED_HINT.format(name='g')}"
    )
    assert messages[0]["content"] == "Be brief."
    shown, tools = ToolChoice.parse("required").apply(messages[1:], TOOLS)
    assert tools == TOOLS and shown[0] == {"role": "system", "content": REQUIRED_HINT}
    assert ToolChoice.parse("none").apply(messages, TOOLS) == (messages, None)
    assert ToolChoice().apply(messages, TOOLS) == (messages, TOOLS)


def _vendor(syntax: Syntax) -> ToolFormat:
    tool = detect_formats(Tok(list(syntax.evidence))).tool
    assert tool is not None and tool.name == syntax.name
    return tool


VENDOR = [_vendor(s) for s in SYNTAXES if s.name != "seed_oss"]  # Seed's XML: not enforced


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, *VENDOR], ids=lambda f: f.name)
def test_a_forced_call_reads_back_through_the_formats_own_parser(fmt: ToolFormat):
    shape = tool_call_shape(fmt)
    assert shape is not None and shape.fits([TOOLS[0]])
    schema = shape.schema([TOOLS[0]])
    call = {shape.name_key: "f", shape.arguments_key: {"a": 3}}
    if shape.name_in_prefix:  # DeepSeek: the name is written before the arguments
        call = {"a": 3}
    body = json.dumps([call] if shape.as_list else call)
    assert ("array" if shape.as_list else "object") == schema["type"]
    text = shape.opening([TOOLS[0]]) + body + shape.suffix
    assert text.startswith(fmt.start) or (fmt.json_at_start and text.startswith("{"))
    inner = text.removeprefix(fmt.start)
    if fmt.end:
        inner = inner.removesuffix(fmt.end)
    assert fmt.parse(inner) == [{"name": "f", "arguments": {"a": 3}}]


def test_deepseek_enforces_a_choice_of_one_tool_only():
    shape = tool_call_shape(_vendor(SYNTAXES[0]))
    assert shape is not None and shape.fits([TOOLS[0]]) and not shape.fits(TOOLS)
    assert tool_call_shape(_vendor(SYNTAXES[1])) is None  # Seed-OSS


def test_required_with_several_tools_allows_any_of_them_with_its_own_parameters():
    schema = tool_call_shape(HERMES).schema(TOOLS)  # type: ignore[union-attr]
    names = [alt["properties"]["name"]["const"] for alt in schema["anyOf"]]
    assert names == ["f", "g"]
    assert schema["anyOf"][0]["properties"]["arguments"] == SCHEMA
    assert schema["anyOf"][1]["properties"]["arguments"] == {"type": "object"}  # none given


def test_chat_constraint_for_an_answer_and_for_a_forced_call():
    formats = Formats(reasoning=THINK, harmony=False, tool=HERMES)
    answer, warning = chat_constraint(formats, schema=SCHEMA, forced=[], reasoning_open=True)
    assert warning is None and answer is not None
    assert (json.loads(answer.schema), answer.param, answer.prefix) == (
        SCHEMA,
        "response_format",
        "",
    )
    assert (answer.reasoning, answer.reasoning_open) == (THINK, True)
    call, _ = chat_constraint(formats, schema=SCHEMA, forced=TOOLS[:1], reasoning_open=False)
    assert call is not None and call.param == "tool_choice"  # a forced call wins
    assert (call.prefix, call.suffix) == ("<tool_call>\n", "\n</tool_call>")
    closed, _ = chat_constraint(
        formats, schema=SCHEMA, forced=[], reasoning_open=False, reasoning_closed=True
    )
    assert closed is not None and closed.reasoning is None  # answered at once
    assert chat_constraint(formats, schema=None, forced=[], reasoning_open=False) == (None, None)


def test_a_forced_call_without_a_known_format_is_only_asked_for():
    for formats in (
        Formats(reasoning=None, harmony=False, tool=None),
        Formats(None, False, ToolFormat("longcat", "<longcat_tool_call>", None, json.loads)),
    ):
        constraint, warning = chat_constraint(
            formats, schema=None, forced=TOOLS, reasoning_open=False
        )
        assert constraint is None and warning is not None and "not enforced" in warning


@pytest.mark.parametrize(
    ("formats", "opening"),
    [
        (
            Formats(None, True, None),
            "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        ),
        (
            Formats(
                None, False, ToolFormat("qwen3_coder", "<tool_call>", "</tool_call>", json.loads)
            ),
            "<tool_call>\n<function=f>\n",
        ),
    ],
    ids=["harmony", "qwen3_coder"],
)
def test_a_forced_call_in_other_syntaxes_is_one_grammar_choice_per_tool(formats, opening):
    constraint, warning = chat_constraint(formats, schema=None, forced=TOOLS, reasoning_open=False)
    assert warning is None and constraint is not None and len(constraint.choices) == 2
    first = constraint.choices[0]
    assert first[0].kind is PieceKind.TEXT and first[0].text.startswith(opening)
    assert all(isinstance(p, GrammarPiece) for p in first)


def test_xml_call_choice_writes_required_parameters_typed():
    tool = {
        "type": "function",
        "function": {
            "name": "w",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Rome"]},
                    "note": {"type": "string", "maxLength": 9},
                    "days": {"type": "integer"},
                    "unused": {"type": "string"},
                },
                "required": ["city", "note", "days"],
            },
        },
    }
    (choice,) = call_choices("seed_oss", [tool], 100) or ()
    assert choice == (
        GrammarPiece.literal("<seed:tool_call>\n<function=w>\n<parameter=city>"),
        GrammarPiece.raw_string(0, ("Paris", "Rome")),
        GrammarPiece.literal("</parameter>\n<parameter=note>"),
        GrammarPiece.raw_string(9),
        GrammarPiece.literal("</parameter>\n<parameter=days>"),
        GrammarPiece.json_value('{"type": "integer"}'),
        GrammarPiece.literal("</parameter>\n</function>\n</seed:tool_call>"),
    )


XML_TOOL = {
    "type": "function",
    "function": {
        "name": "w",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Rome"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "days"],
        },
    },
}


@pytest.mark.parametrize(
    ("syntax", "module", "start", "end"),
    [
        ("qwen3_coder", "qwen3_coder", "<tool_call>", "</tool_call>"),
        ("seed_oss", "qwen3_coder", "<seed:tool_call>", "</seed:tool_call>"),
        ("glm47", "glm47", "<tool_call>", "</tool_call>"),
        ("minimax_m2", "minimax_m2", "<minimax:tool_call>", "</minimax:tool_call>"),
        ("pythonic", "pythonic", "<|tool_call_start|>", "<|tool_call_end|>"),
        ("kimi_k2", "kimi_k2", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"),
        ("gemma4", "gemma4", "<|tool_call>", "<tool_call|>"),
    ],
)
def test_xml_call_choice_reads_back_through_the_parser(syntax, module, start, end):
    import importlib

    (choice,) = call_choices(syntax, [XML_TOOL], 100) or ()
    # What the grammar lets through for each value piece: raw text or JSON.
    json_values = {"pythonic": ['"Paris"', "3"], "kimi_k2": ['{"city": "Paris", "days": 3}']}
    values = iter(json_values.get(syntax, ["Paris", "3"]))
    text = "".join(p.text if p.kind is PieceKind.TEXT else next(values) for p in choice)
    assert text.startswith(start) and text.endswith(end)
    parse = importlib.import_module(f"mlx_lm.tool_parsers.{module}").parse_tool_call
    call = parse(text.removeprefix(start).removesuffix(end), [XML_TOOL])
    (call,) = call if isinstance(call, list) else [call]  # Kimi-K2's parser gives a list
    assert (call["name"], call["arguments"]) == ("w", {"city": "Paris", "days": 3})


def test_gemma4_call_choice_quotes_strings_and_writes_other_values_as_json():
    (choice,) = call_choices("gemma4", [XML_TOOL], 100) or ()
    assert choice == (
        GrammarPiece.literal('<|tool_call>call:w{city:<|"|>'),
        GrammarPiece.raw_string(0, ("Paris", "Rome")),
        GrammarPiece.literal('<|"|>,days:'),
        GrammarPiece.json_value('{"type": "integer"}'),
        GrammarPiece.literal("}<tool_call|>"),
    )
