"""Responses `instructions` and `input` items -> the chat layer's chat messages.

A reasoning item goes to the next assistant turn as reasoning_content, function_call and
custom_tool_call items to its tool_calls (named as the model saw them: responses.tools), each
function_call_output or custom_tool_call_output is a `tool` message.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from mlxd.errors import InvalidRequest
from mlxd.server.responses.items import (
    CustomToolCallItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    ReasoningItem,
)
from mlxd.server.responses.tools import CUSTOM_INPUT

if TYPE_CHECKING:
    from mlxd.server.responses.tools import FlatTools


def chat_messages(
    instructions: str | None, items: str | list[Any], tools: FlatTools | None = None
) -> list[dict[str, Any]]:
    """`instructions` and `input` as the chat layer's messages (`tools`: the request's,
    to name earlier calls as the model sees them)."""
    messages: list[dict[str, Any]] = []
    if instructions is not None:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    else:
        _ItemsToMessages(messages, tools).add_all(items)
    return messages


class _ItemsToMessages:
    """Folds input items into chat messages: consecutive assistant items (reasoning, text,
    function calls) are one assistant turn."""

    def __init__(self, messages: list[dict[str, Any]], tools: FlatTools | None) -> None:
        self.messages = messages
        self.tools = tools
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
            elif isinstance(item, FunctionCallItem | CustomToolCallItem):
                self._call(item)
            elif isinstance(item, FunctionCallOutputItem):
                self._tool_output(item, f"input.{i}.call_id")

    def _call(self, item: FunctionCallItem | CustomToolCallItem) -> None:
        self.call_ids.add(item.call_id)
        name = item.name
        if self.tools is not None:
            name = self.tools.flat_name(item.name, item.namespace)
        if isinstance(item, CustomToolCallItem):  # as the model wrote it: {"input": ...}
            arguments = json.dumps({CUSTOM_INPUT: item.input}, ensure_ascii=False)
        else:
            arguments = item.arguments
        fn = {"name": name, "arguments": arguments}
        call = {"id": item.call_id, "type": "function", "function": fn}
        self._assistant_turn(accepts_text=False).setdefault("tool_calls", []).append(call)

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
