"""A forced call in the syntaxes whose call is not one JSON value between two markers: one
grammar choice per allowed tool (chat.constraints builds the OutputConstraint from them).

    qwen3_coder  <tool_call> <function=NAME> <parameter=K> V </parameter> </function> </tool_call>
    seed_oss     the same inside <seed:tool_call>...</seed:tool_call>
    glm47        <tool_call>NAME <arg_key>K</arg_key> <arg_value>V</arg_value> </tool_call>
    minimax_m2   <minimax:tool_call> <invoke name="NAME"> <parameter name="K">V</parameter> ...
    deepseek     its call tokens around NAME<｜tool▁sep｜>{JSON}
    harmony      <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{JSON}<|call|>
    kimi_k2      its section and call tokens around functions.NAME:0 ... {JSON}
    pythonic     <|tool_call_start|>[NAME(K=V, ...)]<|tool_call_end|> (LFM2), each V as JSON
    gemma4       <|tool_call>call:NAME{K:V,...}<tool_call|>, a string V between <|"|> quotes
(newlines between the tags as each family writes them).

XML-style calls write the tool's required parameters, in its schema's order: a string as raw
text (one of its enum values, or bounded free text), any other type as JSON, which is what
the parsers convert each value back from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mlxd.chat.tool_syntax.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from mlxd.types import GrammarPiece, PieceKind

__all__ = ["call_choices"]

Choice = tuple[GrammarPiece, ...]


@dataclass(frozen=True, slots=True)
class _XmlSyntax:
    opening: str  # with {name}
    param_open: str  # with {key}
    param_close: str
    closing: str


_XML = {
    "qwen3_coder": _XmlSyntax(
        "<tool_call>\n<function={name}>\n",
        "<parameter={key}>\n",
        "\n</parameter>\n",
        "</function>\n</tool_call>",
    ),
    "seed_oss": _XmlSyntax(
        "<seed:tool_call>\n<function={name}>\n",
        "<parameter={key}>",
        "</parameter>\n",
        "</function>\n</seed:tool_call>",
    ),
    "minimax_m2": _XmlSyntax(
        '<minimax:tool_call>\n<invoke name="{name}">\n',
        '<parameter name="{key}">',
        "</parameter>\n",
        "</invoke>\n</minimax:tool_call>",
    ),
    "glm47": _XmlSyntax(
        "<tool_call>{name}\n",
        "<arg_key>{key}</arg_key>\n<arg_value>",
        "</arg_value>\n",
        "</tool_call>",
    ),
}
# Syntaxes where the name is written before the arguments, which are one JSON object.
_JSON_ARGUMENTS = {
    "deepseek": (f"{CALLS_BEGIN}{CALL_BEGIN}{{name}}{SEP}", f"{CALL_END}{CALLS_END}"),
    "harmony": (
        "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>",
        "<|call|>",
    ),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.{name}:0"
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
}

_GEMMA4_QUOTE = '<|"|>'  # Gemma 4's string delimiter, one token of its vocabulary


def call_choices(
    syntax: str, tools: list[dict[str, Any]], string_chars: int
) -> tuple[Choice, ...] | None:
    """One choice per tool in `syntax` (a ToolFormat name, or "harmony"); None when the
    syntax has no grammar here. `string_chars` bounds a free-text string value."""
    build: Callable[[Mapping[str, Any]], Choice]
    if syntax in _XML:
        xml = _XML[syntax]
        build = lambda fn: _xml_call(xml, fn, string_chars)  # noqa: E731
    elif syntax in _JSON_ARGUMENTS:
        opening, closing = _JSON_ARGUMENTS[syntax]
        build = lambda fn: _json_call(opening, closing, fn)  # noqa: E731
    elif syntax == "pythonic":
        build = _pythonic_call
    elif syntax == "gemma4":
        build = lambda fn: _gemma4_call(fn, string_chars)  # noqa: E731
    else:
        return None
    return tuple(build(t["function"]) for t in tools)


def _json_call(opening: str, closing: str, fn: Mapping[str, Any]) -> Choice:
    params = fn.get("parameters") or {"type": "object"}
    return (
        GrammarPiece.literal(opening.replace("{name}", fn["name"])),
        GrammarPiece.json_value(json.dumps(params, ensure_ascii=False)),
        GrammarPiece.literal(closing),
    )


def _required(fn: Mapping[str, Any]) -> tuple[Mapping[str, Any], list[str]]:
    """(the tool's parameter schemas, its required keys in their schema order)."""
    params = fn.get("parameters") or {}
    properties = params.get("properties") or {}
    return properties, [k for k in properties if k in (params.get("required") or ())]


def _pythonic_call(fn: Mapping[str, Any]) -> Choice:
    """LFM2: [NAME(k=V, ...)] with each V as JSON, which its parser reads as a Python literal
    (it maps true/false/null)."""
    properties, required = _required(fn)
    pieces = [GrammarPiece.literal(f"<|tool_call_start|>[{fn['name']}(")]
    for i, key in enumerate(required):
        pieces.append(GrammarPiece.literal((", " if i else "") + f"{key}="))
        value = properties[key] if isinstance(properties[key], Mapping) else {}
        pieces.append(GrammarPiece.json_value(json.dumps(value, ensure_ascii=False)))
    pieces.append(GrammarPiece.literal(")]<|tool_call_end|>"))
    return tuple(_merged(pieces))


def _gemma4_call(fn: Mapping[str, Any], string_chars: int) -> Choice:
    """Gemma 4: call:NAME{k:V,...} with bare keys; a string V as raw text between <|"|>
    quotes (raw text has no "<", so it cannot close them), any other V as JSON, which
    mlx-lm's gemma4 parser keeps as it is."""
    properties, required = _required(fn)
    pieces = [GrammarPiece.literal(f"<|tool_call>call:{fn['name']}{{")]
    for i, key in enumerate(required):
        pieces.append(GrammarPiece.literal(("," if i else "") + f"{key}:"))
        value = _value(properties[key], string_chars)
        if value.kind is PieceKind.STRING:
            pieces += [
                GrammarPiece.literal(_GEMMA4_QUOTE),
                value,
                GrammarPiece.literal(_GEMMA4_QUOTE),
            ]
        else:
            pieces.append(value)
    pieces.append(GrammarPiece.literal("}<tool_call|>"))
    return tuple(_merged(pieces))


def _xml_call(xml: _XmlSyntax, fn: Mapping[str, Any], string_chars: int) -> Choice:
    properties, required = _required(fn)
    pieces: list[GrammarPiece] = [GrammarPiece.literal(xml.opening.replace("{name}", fn["name"]))]
    for key in required:
        pieces.append(GrammarPiece.literal(xml.param_open.replace("{key}", key)))
        pieces.append(_value(properties[key], string_chars))
        pieces.append(GrammarPiece.literal(xml.param_close))
    pieces.append(GrammarPiece.literal(xml.closing))
    return tuple(_merged(pieces))


def _value(schema: object, string_chars: int) -> GrammarPiece:
    if not isinstance(schema, Mapping) or schema.get("type") != "string":
        return GrammarPiece.json_value(json.dumps(schema if isinstance(schema, Mapping) else {}))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(e, str) and "<" not in e for e in enum):
        return GrammarPiece.raw_string(0, tuple(enum))
    limit = schema.get("maxLength")
    bound = min(limit, string_chars) if isinstance(limit, int) and limit >= 0 else string_chars
    return GrammarPiece.raw_string(bound)


def _merged(pieces: list[GrammarPiece]) -> list[GrammarPiece]:
    """Adjacent literal texts joined (fewer grammar items, the same language)."""
    out: list[GrammarPiece] = []
    for piece in pieces:
        last = out[-1] if out else None
        if last is not None and piece.kind is PieceKind.TEXT and last.kind is PieceKind.TEXT:
            out[-1] = GrammarPiece.literal(last.text + piece.text)
        else:
            out.append(piece)
    return out
