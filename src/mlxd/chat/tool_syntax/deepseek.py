"""DeepSeek's tool-call tokens, in the V3 and the V3.1 spelling.

Between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>, one block per call:
  V3.1:  <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜>
  V3/R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{JSON}\\n```<｜tool▁call▁end｜>
"""

from __future__ import annotations

import json
from typing import Any

from mlxd.chat.json_text import loads_json

__all__ = ["CALL_BEGIN", "CALL_END", "CALLS_BEGIN", "CALLS_END", "SEP", "parse_deepseek"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_FENCE = "```"


def parse_deepseek(text: str) -> list[dict[str, Any]]:
    """The calls of one tool-calls section (its body, without the section markers). Raises
    ValueError when a block is not a call."""
    blocks = text.split(CALL_BEGIN)
    if blocks[0].strip():
        raise ValueError("text before the first call")
    calls = [_parse_block(b) for b in blocks[1:]]
    if not calls:
        raise ValueError("no call in the tool-calls section")
    return calls


def _parse_block(block: str) -> dict[str, Any]:
    body, end, rest = block.partition(CALL_END)
    if not end or rest.strip():
        raise ValueError("a call must end with " + CALL_END)
    head, sep, tail = body.partition(SEP)
    if not sep:
        raise ValueError("a call needs " + SEP)
    if head.strip() == "function" and _FENCE in tail:  # V3: the name, then a fenced JSON
        name, _, fenced = tail.partition("\n")
        args_text = fenced.strip().removeprefix(_FENCE + "json").removesuffix(_FENCE)
    else:
        name, args_text = head, tail
    name = name.strip()
    if not name:
        raise ValueError("a call needs a name")
    try:
        args = loads_json(args_text.strip()) if args_text.strip() else {}
    except json.JSONDecodeError as e:
        raise ValueError(f"tool call arguments are not JSON: {e.msg}") from None
    if not isinstance(args, dict):
        raise ValueError("tool call arguments must be an object")
    return {"name": name, "arguments": args}
