"""Which reasoning markers and tool-call format a model speaks, read from its tokenizer.

Detection looks only at the vocabulary and the chat template text (never the model's
directory name). The vendor syntaxes mlx-lm cannot read (DeepSeek, Seed-OSS, Phi-4-mini,
Nemotron, Command-R, Granite) are chat.tool_syntax's and come first; their markers are ones
no mlx-lm parser reads. Otherwise tool formats reuse mlx_lm.tool_parsers: when mlx-lm inferred
a family parser for the tokenizer (qwen3_coder, gemma, glm47, ...), we use its start/end
markers and its parse function, even when its start marker is Hermes' <tool_call>; Hermes,
Llama 3 JSON and Mistral are parsed here because mlx-lm's json_tools parser requires a
template spelling ("tool_call.name") many templates lack. Kimi-K2's section token is looked
up in the vocabulary (its instruct template never spells it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlxd.chat.tool_syntax.families import EVIDENCE, Syntax, vendor_syntax
from mlxd.chat.tool_syntax.json_calls import (
    call_from_object,
    parse_json_call,
    parse_llama3,
    parse_mistral,
)
from mlxd.errors import InvalidRequest
from mlxd.types import Tokenizer

__all__ = [
    "Formats",
    "ToolFormat",
    "detect_formats",
    "named_template",
    "detect_reasoning",
    "detect_tool_format",
    "explicit_markers",
    "parse_json_call",
    "parse_llama3",
    "parse_mistral",
    "GENERIC_JSON",
    "HERMES",
    "LLAMA3",
    "MISTRAL",
]

THINK = ("<think>", "</think>")
# Other families' reasoning markers, looked for after <think>: Seed-OSS, Command-R7B.
OTHER_THINK = (("<seed:think>", "</seed:think>"), ("<|START_THINKING|>", "<|END_THINKING|>"))
HARMONY_MARKERS = ("<|channel|>", "<|message|>")
KIMI_SECTION = "<|tool_calls_section_begin|>"
RESPONSE_TAGS = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")  # Command-R7B wraps its answer
# Granite 3.3 thinking: "write your response between <response></response>" (its template's
# words; MiniMax-M2 wraps tool results, not answers, in the same tags, never written adjacent).
GRANITE_RESPONSE = ("<response>", "</response>")

Parser = Callable[[str], list[dict[str, Any]]]  # raises ValueError when the text is no call


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """How tool calls look in the output. A None `end` means the call runs to the output's end;
    an empty `start` (GENERIC_JSON) means only a JSON object opening the answer is a call."""

    name: str
    start: str
    end: str | None
    parse: Parser
    json_at_start: bool = False  # Llama 3: a bare JSON object as the whole answer is a call


@dataclass(frozen=True, slots=True)
class Formats:
    reasoning: tuple[str, str] | None  # (start, end) markers, None: no reasoning split
    harmony: bool  # GPT-OSS harmony channels (its own reasoning and tool syntax)
    tool: ToolFormat | None
    # Markers around the answer that are layout, dropped from it (Command-R7B's response tags).
    layout: tuple[str, ...] = ()


def detect_formats(
    tokenizer: Tokenizer,
    reasoning: object = "auto",
    tools: list[dict[str, Any]] | None = None,
) -> Formats:
    """Detect formats; `reasoning` is "auto", None (no split) or explicit (start, end)."""
    vocab = _vocab(tokenizer)
    template = _template_text(tokenizer, bool(tools))
    harmony = all(m in vocab for m in HARMONY_MARKERS)
    markers: tuple[str, str] | None
    if reasoning == "auto":
        markers = None if harmony else detect_reasoning(tokenizer, vocab, template)
    elif reasoning is None:
        markers = None
    else:
        markers = explicit_markers(reasoning)
    tool = None if harmony else detect_tool_format(tokenizer, vocab, template, tools)
    layout = RESPONSE_TAGS if _mentions_all(vocab, template, RESPONSE_TAGS) else ()
    if "".join(GRANITE_RESPONSE) in template:
        layout = GRANITE_RESPONSE
    return Formats(
        reasoning=markers, harmony=harmony and reasoning == "auto", tool=tool, layout=layout
    )


def detect_reasoning(
    tokenizer: Tokenizer, vocab: frozenset[str] | None = None, template: str | None = None
) -> tuple[str, str] | None:
    """Think markers: another family's markers its template spells (Seed-OSS, Command-R7B),
    else mlx-lm's inference from the vocabulary, else <think> (then the others) in the
    vocabulary or the template."""
    template = _template_text(tokenizer) if template is None else template
    for pair in OTHER_THINK:  # a vendor's own markers in its template win over a <think> token
        if all(m in template for m in pair):
            return pair
    start = getattr(tokenizer, "think_start", None) if _is_wrapper(tokenizer) else None
    end = getattr(tokenizer, "think_end", None) if _is_wrapper(tokenizer) else None
    if isinstance(start, str) and isinstance(end, str):
        return (start, end)
    vocab = _vocab(tokenizer) if vocab is None else vocab
    for pair in (THINK, *OTHER_THINK):
        if all(m in vocab for m in pair) or all(m in template for m in pair):
            return pair
    return None


def detect_tool_format(
    tokenizer: Tokenizer,
    vocab: frozenset[str],
    template: str,
    tools: list[dict[str, Any]] | None = None,
) -> ToolFormat | None:
    """The tool-call format: a vendor syntax mlx-lm has no parser for (tool_syntax), else
    mlx-lm's inferred parser unless it is its generic JSON one (then ours, which needs no
    template spelling), else markers in the vocabulary or template."""
    vendor = vendor_syntax(vocab, template)
    if vendor is not None:
        return _vendor_format(vendor, tools)
    start = getattr(tokenizer, "tool_call_start", None) if _is_wrapper(tokenizer) else None
    mlx_parser = getattr(tokenizer, "tool_parser", None) if _is_wrapper(tokenizer) else None
    if isinstance(start, str) and start and mlx_parser is not None:
        name = str(getattr(mlx_parser, "__module__", "mlx_lm")).rsplit(".", 1)[-1]
        if name != "json_tools":  # a family parser (glm47, qwen3_coder, ...) is never replaced
            end = getattr(tokenizer, "tool_call_end", None) or None
            return ToolFormat(name, start, end, _wrap_mlx_parser(mlx_parser, tools))
    if KIMI_SECTION in vocab:  # Kimi-K2 instruct: its template never spells the section tokens
        return _mlx_format("kimi_k2", tools)
    # What the template spells first (the model was trained on it), then the vocabulary.
    for fmt, marker in (
        (HERMES, "<tool_call>"),
        (MISTRAL, "[TOOL_CALLS]"),
        (LLAMA3, "<|python_tag|>"),
    ):
        if marker in template:
            return fmt
    if "<tool_call>" in vocab:
        return HERMES
    if "[TOOL_CALLS]" in vocab:
        return MISTRAL
    if "<|python_tag|>" in vocab or ('"parameters"' in template and "<|eot_id|>" in vocab):
        return LLAMA3
    return None


# ---- parsers ----------------------------------------------------------------------


def _wrap_mlx_parser(
    parser: Callable[[str, list[dict[str, Any]] | None], object],
    tools: list[dict[str, Any]] | None,
) -> Parser:
    def parse(text: str) -> list[dict[str, Any]]:
        try:
            result = parser(text, tools)
        except Exception as e:  # mlx-lm parsers raise assorted errors on bad text
            raise ValueError(f"tool call did not parse: {e}") from None
        return [call_from_object(c) for c in (result if isinstance(result, list) else [result])]

    return parse


def _vendor_format(syntax: Syntax, tools: list[dict[str, Any]] | None) -> ToolFormat:
    return ToolFormat(syntax.name, syntax.start, syntax.end, lambda text: syntax.parse(text, tools))


def _mlx_format(module: str, tools: list[dict[str, Any]] | None) -> ToolFormat:
    """The format of mlx-lm's parser `module` (mlx_lm.tool_parsers.<module>)."""
    import importlib

    mod = importlib.import_module(f"mlx_lm.tool_parsers.{module}")
    parse = _wrap_mlx_parser(mod.parse_tool_call, tools)
    return ToolFormat(module, mod.tool_call_start, mod.tool_call_end or None, parse)


HERMES = ToolFormat("hermes", "<tool_call>", "</tool_call>", parse_json_call)
MISTRAL = ToolFormat("mistral", "[TOOL_CALLS]", None, parse_mistral)
LLAMA3 = ToolFormat("llama3", "<|python_tag|>", None, parse_llama3, json_at_start=True)
# A model with no tool-call format of its own, made to call a tool (a forced tool_choice): the
# whole answer is {"name": ..., "arguments": {...}} (chat.constraints enforces it), no markers.
GENERIC_JSON = ToolFormat("json", "", None, parse_json_call, json_at_start=True)


# ---- tokenizer access ------------------------------------------------------------------


def _is_wrapper(tokenizer: Tokenizer) -> bool:
    return hasattr(type(tokenizer), "detokenizer")


# Every vocabulary entry detection asks about; only these are kept per tokenizer.
_MARKERS = frozenset(
    {
        *THINK,
        *(m for pair in OTHER_THINK for m in pair),
        *HARMONY_MARKERS,
        KIMI_SECTION,
        "<tool_call>",
        "[TOOL_CALLS]",
        "<|python_tag|>",
    }
    | {"<|eot_id|>", *RESPONSE_TAGS}
    | EVIDENCE
)
_VOCAB_CACHE: weakref.WeakKeyDictionary[Tokenizer, frozenset[str]] = weakref.WeakKeyDictionary()


def _vocab(tokenizer: Tokenizer) -> frozenset[str]:
    """The detection markers in the vocabulary, computed once per tokenizer (get_vocab()
    builds a dict of the whole vocabulary, too slow to repeat per request)."""
    try:
        return _VOCAB_CACHE[tokenizer]
    except (KeyError, TypeError):
        pass
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # a tokenizer without get_vocab: detection falls back to the template
        vocab = {}
    found = frozenset(m for m in _MARKERS if isinstance(vocab, dict) and m in vocab)
    try:
        _VOCAB_CACHE[tokenizer] = found
    except TypeError:  # not weak-referenceable: no cache
        pass
    return found


def _template_text(tokenizer: Tokenizer, tools: bool = False) -> str:
    return named_template(tokenizer, tools) or ""


def named_template(tokenizer: Tokenizer, tools: bool) -> str | None:
    """The tokenizer's chat template; of named ones (Command R+: default, tool_use, rag) the
    one Hugging Face picks: `tool_use` for a request with tools, else `default`."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        named = template.get("tool_use") if tools else None
        template = named or template.get("default") or next(iter(template.values()), None)
    return template if isinstance(template, str) else None


def _mentions(vocab: frozenset[str], template: str, marker: str) -> bool:
    return marker in vocab or marker in template


def _mentions_all(vocab: frozenset[str], template: str, markers: tuple[str, ...]) -> bool:
    return all(m in vocab for m in markers) or all(m in template for m in markers)


def explicit_markers(reasoning: object) -> tuple[str, str]:
    if (
        isinstance(reasoning, tuple | list)
        and len(reasoning) == 2
        and all(isinstance(m, str) and m for m in reasoning)
    ):
        return (reasoning[0], reasoning[1])
    raise InvalidRequest(
        "reasoning markers must be a (start, end) pair of non-empty strings", param="reasoning"
    )
