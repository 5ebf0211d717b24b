"""The vendors' tool-call syntaxes mlx-lm cannot read, and how each is recognised.

Each syntax is recognised by marker strings that all appear in the chat template text or all
in the vocabulary (some templates never spell their tokens). The markers are ones no mlx-lm
parser reads, so these are checked before mlx-lm's inference; Seed-OSS is the exception that
needs it: mlx-lm reads qwen3_coder's `<tool_call>\\n<function=` inside `<seed:tool_call>\\n
<function=`, so its parser is right and its markers are not (we keep the parser).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from mlxd.chat.tool_syntax.deepseek import CALLS_BEGIN, CALLS_END, parse_deepseek
from mlxd.chat.tool_syntax.json_calls import call_from_object, parse_json_call

__all__ = ["EVIDENCE", "SYNTAXES", "Syntax", "vendor_syntax"]

Tools = list[dict[str, Any]] | None
ToolParser = Callable[[str, Tools], list[dict[str, Any]]]  # ValueError: the text is no call


@dataclass(frozen=True, slots=True)
class Syntax:
    """A tool-call syntax: `start`/`end` around each block (end None: to the output's end)."""

    name: str
    start: str
    end: str | None
    parse: ToolParser
    evidence: tuple[str, ...]  # all in the template, or all in the vocabulary


def _json(text: str, tools: Tools) -> list[dict[str, Any]]:
    return parse_json_call(text)


def _deepseek(text: str, tools: Tools) -> list[dict[str, Any]]:
    return parse_deepseek(text)


def _seed(text: str, tools: Tools) -> list[dict[str, Any]]:
    """One <function=NAME><parameter=K>V</parameter></function> block; each V converted to the
    JSON type the tool's schema declares for K (mlx-lm's qwen3_coder parser does both)."""
    from mlx_lm.tool_parsers import qwen3_coder

    try:
        call = qwen3_coder.parse_tool_call(text.strip(), tools)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"not a <function=...> call: {e}") from None
    return [call_from_object(call)]


def _action(text: str, tools: Tools) -> list[dict[str, Any]]:
    """Command R+'s tool_use answer: a fenced JSON list of {"tool_name", "parameters"} after
    `Action:`. Its `directly-answer` pseudo-tool (answer without tools) is no call."""
    body = text.strip().removeprefix("```json").removesuffix("```").strip()
    calls = [c for c in parse_json_call(body) if c["name"] != DIRECTLY_ANSWER]
    if not calls:
        raise ValueError("no tool call: only directly-answer")
    return calls


DIRECTLY_ANSWER = "directly-answer"
ACTION = "Action:"

# Checked in order: Phi-4-mini's start token is also Granite's, which has no end token.
SYNTAXES = (
    Syntax("deepseek", CALLS_BEGIN, CALLS_END, _deepseek, (CALLS_BEGIN,)),
    Syntax("seed_oss", "<seed:tool_call>", "</seed:tool_call>", _seed, ("<seed:tool_call>",)),
    Syntax("phi4", "<|tool_call|>", "<|/tool_call|>", _json, ("<|tool_call|>", "<|/tool_call|>")),
    Syntax("nemotron", "<TOOLCALL>", "</TOOLCALL>", _json, ("<TOOLCALL>", "</TOOLCALL>")),
    Syntax("command_r", "<|START_ACTION|>", "<|END_ACTION|>", _json, ("<|START_ACTION|>",)),
    Syntax("granite", "<|tool_call|>", None, _json, ("<|tool_call|>",)),
    Syntax("command_r_plus", ACTION, None, _action, (ACTION, DIRECTLY_ANSWER)),
)

# Every vocabulary entry the syntaxes are recognised by.
EVIDENCE = frozenset(m for s in SYNTAXES for m in s.evidence)


def vendor_syntax(vocab: Collection[str], template: str) -> Syntax | None:
    """The first syntax whose markers all appear in `template` or all in `vocab`."""
    for syntax in SYNTAXES:
        if all(m in template for m in syntax.evidence) or all(m in vocab for m in syntax.evidence):
            return syntax
    return None
