"""Lines agents put at the very top of a prompt that change with every request and mean
nothing to the model: removed before templating, so requests that differ only in them share
the prefix cache (docs/usage/serve.md, "What the server normalises").

Only the start of the first message is looked at, and only when it is a system message: a
line anywhere else is the conversation's own text and stays.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["VOLATILE_LINES", "without_volatile_lines"]

# (who sends it, the line). Claude Code's first system block is its billing header,
# `x-anthropic-billing-header: cc_version=2.1.332.1c9; cc_entrypoint=sdk-cli;` (some versions
# add `cch=<hash>;`): the version's suffix and the hash are computed from the prompt.
VOLATILE_LINES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Claude Code", re.compile(r"x-anthropic-billing-header:[^\n]*(?:\n|$)")),
)


def without_volatile_lines(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with the volatile lines at the start of a leading system message removed
    (the message itself, if nothing else is left of it). The input is not changed."""
    if not messages or messages[0].get("role") != "system":
        return messages
    first = messages[0]
    content = first.get("content")
    if isinstance(content, str):
        text = _strip(content)
        if text == content:
            return messages
        rest = messages[1:]
        return rest if not text else [{**first, "content": text}, *rest]
    if isinstance(content, list) and content and _is_text_part(content[0]):
        text = _strip(content[0]["text"])
        if text == content[0]["text"]:
            return messages
        parts = content[1:] if not text else [{**content[0], "text": text}, *content[1:]]
        return messages[1:] if not parts else [{**first, "content": parts}, *messages[1:]]
    return messages


def _strip(text: str) -> str:
    """`text` without the volatile lines it starts with."""
    changed = True
    while changed:
        changed = False
        for _, line in VOLATILE_LINES:
            found = line.match(text)
            if found is not None:
                text = text[found.end() :]
                changed = True
    return text


def _is_text_part(part: object) -> bool:
    return (
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
    )
