"""Anthropic messages -> the chat layer's OpenAI-shaped chat messages.

System first (a `system` turn in `messages` stays where it is); thinking blocks become the
assistant's reasoning_content, tool_use blocks its tool_calls, each tool_result a `tool`
message ahead of the user's text.
"""

from __future__ import annotations

from typing import Any

from mlxd.chat.messages import join_text
from mlxd.errors import InvalidRequest
from mlxd.server.anthropic.blocks import (
    ContentBlock,
    ImageBlock,
    MessageParam,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)


def chat_messages(system: str | None, turns: list[MessageParam]) -> list[dict[str, Any]]:
    """The conversation as the chat layer's messages; a last assistant turn with text is
    kept for the answer to continue (`prefilled`), an empty one dropped."""
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": system})
    called: set[str] = set()  # tool_use ids of the previous assistant turn
    used: set[str] = set()  # every tool_use id so far: Anthropic wants them unique
    for i, m in enumerate(turns):
        if not m.content and not (m.role == "assistant" and i == len(turns) - 1):
            raise InvalidRequest(
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message",
                param=f"messages.{i}.content",
            )
        if m.role == "assistant":
            messages.append(_assistant(m, f"messages.{i}.content", used))
            called = {b.id for b in m.blocks() if isinstance(b, ToolUseBlock)}
        elif m.role == "system":  # in place: the model's template decides how it shows
            messages.append(_system(m, f"messages.{i}.content"))
        else:
            messages += _user(m, called, f"messages.{i}.content")
            called = set()
    last = turns[-1]
    if last.role == "assistant" and not prefilled(turns):
        if last.content:  # tool calls or thinking without text: nothing to continue
            raise InvalidRequest(
                "a final assistant message can be continued from its text only",
                param=f"messages.{len(turns) - 1}.content",
            )
        messages.pop()  # an empty final assistant turn: the answer starts the turn
    return messages


def prefilled(turns: list[MessageParam]) -> bool:
    """The last turn is the assistant's, with text the answer continues (a prefill)."""
    last = turns[-1]
    return last.role == "assistant" and any(
        isinstance(b, TextBlock) and b.text for b in last.blocks()
    )


def _system(m: MessageParam, where: str) -> dict[str, Any]:
    texts = []
    for j, b in enumerate(m.blocks()):
        if not isinstance(b, TextBlock):
            raise _misplaced(b, "system", f"{where}.{j}")
        texts.append(b.text)
    return {"role": "system", "content": join_text(texts)}


def _assistant(m: MessageParam, where: str, used: set[str]) -> dict[str, Any]:
    texts: list[dict[str, str]] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, b in enumerate(m.blocks()):
        if isinstance(b, TextBlock):
            texts.append({"type": "text", "text": b.text})
        elif isinstance(b, ThinkingBlock):
            reasoning.append(b.thinking)
        elif isinstance(b, ToolUseBlock):
            if b.id in used:
                raise InvalidRequest(
                    f"{where}.{j}: `tool_use` ids must be unique", param=f"{where}.{j}.id"
                )
            used.add(b.id)
            fn = {"name": b.name, "arguments": b.input}
            calls.append({"id": b.id, "type": "function", "function": fn})
        elif isinstance(b, ToolResultBlock | ImageBlock):
            raise _misplaced(b, "assistant", f"{where}.{j}")
    msg: dict[str, Any] = {"role": "assistant", "content": texts}
    if calls:
        msg["tool_calls"] = calls
    if reasoning:
        msg["reasoning_content"] = "\n".join(reasoning)
    return msg


def _user(m: MessageParam, called: set[str], where: str) -> list[dict[str, Any]]:
    """Tool results first (one `tool` message each), then the user's text and images, if any."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, b in enumerate(m.blocks()):
        if isinstance(b, ToolResultBlock):
            results.append(_tool_result(b, called, f"{where}.{j}"))
        elif isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            parts.append(b.to_chat())
        elif isinstance(b, ToolUseBlock | ThinkingBlock):
            raise _misplaced(b, "user", f"{where}.{j}")
    if parts or not results:
        results.append({"role": "user", "content": parts})
    return results


def _tool_result(b: ToolResultBlock, called: set[str], where: str) -> dict[str, Any]:
    if b.tool_use_id not in called:
        raise InvalidRequest(
            f"tool_result for '{b.tool_use_id}' has no matching tool_use block in the "
            "previous assistant message",
            param=f"{where}.tool_use_id",
        )
    if b.has_images:
        raise InvalidRequest(
            "images in tool results are not supported; send them in a user turn",
            param=f"{where}.content",
        )
    return {"role": "tool", "tool_call_id": b.tool_use_id, "content": b.text()}


def _misplaced(block: ContentBlock, role: str, where: str) -> InvalidRequest:
    return InvalidRequest(f"a {role} message cannot hold '{block.type}' blocks", param=where)
