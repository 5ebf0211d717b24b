"""loads_json: json.loads for JSON text from outside (a client's string field, such as a tool
call's `arguments`; a model's tool call), nested at most LIMITS["json_depth"] levels.

A request body's own nesting is bounded by its parser, but a string field holds JSON of any
depth: Python's parser recurses once per level (a RecursionError near 1000) and so does every
later walk of the value (templates, dumps). Deeper text raises JsonTooDeep, a JSONDecodeError,
so callers refuse it as they refuse any other bad JSON.
"""

from __future__ import annotations

import json
from typing import Any

from mlxd.config import LIMITS

__all__ = ["JsonTooDeep", "loads_json"]


class JsonTooDeep(json.JSONDecodeError):
    def __init__(self, text: str, limit: int) -> None:
        super().__init__(f"nested deeper than {limit} levels", text, 0)


def loads_json(text: str, max_depth: int | None = None) -> Any:
    """json.loads(text), or JsonTooDeep past `max_depth` levels (default LIMITS["json_depth"])."""
    limit = LIMITS["json_depth"] if max_depth is None else max_depth
    if text.count("[") + text.count("{") <= limit:
        return json.loads(text)  # too few brackets to nest deeper (the common case)
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonTooDeep(text, limit) from None
    if _deeper_than(value, limit):
        raise JsonTooDeep(text, limit)
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether containers nest more than `limit` levels (iterative: no recursion of its own)."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False
