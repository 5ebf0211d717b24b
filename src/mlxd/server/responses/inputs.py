"""Responses `instructions` and `input` items -> the chat layer's chat messages.

A reasoning item goes to the next assistant turn as reasoning_content, function_call items
to its tool_calls, each function_call_output is a `tool` message.
"""

from __future__ import annotations

from typing import Any

from mlxd.errors import InvalidRequest
from mlxd.server.responses.items import (
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
)


def chat_messages(instructions: str | None, items: str | list[Any]) -> list[dict[str, Any]]:
    """`instructions` and `input` as the chat layer's messages."""
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    else:
        _ItemsToMessages(messages).add_all(items)
    return messages


class _ItemsToMessages:
    """Folds input items into chat messages: consecutive assistant items (reasoning, text,
    function calls) are one assistant turn."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.reasoning: list[str] = []  # waits for the next assistant turn
        self.call_ids: set[str] = set()

    def add_all(self, items: list[Any]) -> None:
        for i, item in enumerate(items):
            if isinstance(item, ReasoningItem):
                self.reasoning.append(item.text())
            elif isinstance(item, MessageItem) and item.role == "assistant":
                turn = self._assistant_turn(accepts_text=True)
                turn["content"] += item.parts()
            elif isinstance(item, MessageItem):
                self.messages.append({"role": item.role, "content": item.parts()})
            elif isinstance(item, FunctionCallItem):
                self.call_ids.add(item.call_id)
                fn = {"name": item.name, "arguments": item.arguments}
                call = {"id": item.call_id, "type": "function", "function": fn}
                self._assistant_turn(accepts_text=False).setdefault("tool_calls", []).append(call)
            elif isinstance(item, FunctionCallOutputItem):
                self._tool_output(item, f"input.{i}.call_id")

    def _assistant_turn(self, *, accepts_text: bool) -> dict[str, Any]:
        """The assistant message being built, or a new one (text never follows its calls)."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant":
            if not (accepts_text and last.get("tool_calls")):
                return last
        turn: dict[str, Any] = {"role": "assistant", "content": []}
        if self.reasoning:
            turn["reasoning_content"] = "\n".join(self.reasoning)
            self.reasoning = []
        self.messages.append(turn)
        return turn

    def _tool_output(self, item: FunctionCallOutputItem, where: str) -> None:
        if item.call_id not in self.call_ids:
            raise InvalidRequest(
                f"function_call_output for '{item.call_id}' has no matching function_call "
                "earlier in input",
                param=where,
            )
        self.messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
