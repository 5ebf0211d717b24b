"""ChatRequests from raw options and OpenAI-spelled tool choices, as the front doors build them."""

from __future__ import annotations

from typing import Any

from mlxd.chat.chat_request import ChatRequest
from mlxd.chat.options import ChatOptions
from mlxd.chat.tool_choice import ToolChoice


def chat_request(
    messages: list[dict[str, Any]],
    options: dict[str, Any] | None = None,
    *,
    tool_choice: object = None,
    **fields: Any,
) -> ChatRequest:
    """`options` keyed by Option name (validated as a front door validates them)."""
    choice = ToolChoice.parse(tool_choice)
    return ChatRequest(messages, ChatOptions.parse(options or {}), tool_choice=choice, **fields)
