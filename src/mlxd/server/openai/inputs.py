"""A chat completions request -> chat-layer inputs (messages, tools, template kwargs)."""

from __future__ import annotations

from typing import Any

from mlxd.chat.messages import check_template_kwargs
from mlxd.errors import InvalidRequest
from mlxd.server.openai.schemas import ChatCompletionRequest, NamedToolChoice
from mlxd.server.request_inputs import ChatInputs, ToolChoice, apply_tool_choice
from mlxd.server.settings import ServerSettings


def chat_inputs(req: ChatCompletionRequest) -> ChatInputs:
    """(messages, tools, template_kwargs) for start_chat, honouring tool_choice: the prompt
    says what it asks for; start_chat enforces a forced call with a grammar."""
    messages = [m.to_template() for m in req.messages]
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice
    if isinstance(choice, NamedToolChoice):
        tools = apply_tool_choice(messages, tools, ToolChoice.NAMED, choice.function.name)
    elif choice is not None:
        tools = apply_tool_choice(messages, tools, ToolChoice(choice))
    return ChatInputs(messages, tools, template_kwargs(req))


def request_template(req: ChatCompletionRequest, settings: ServerSettings) -> str | None:
    """The request's own `chat_template`, if the operator allows requests to set one."""
    if req.chat_template is None:
        return None
    if not settings.request_chat_template:
        raise InvalidRequest(
            "a request may not set 'chat_template' (the model's own template is used); "
            "the operator can allow it with MLXD_REQUEST_CHAT_TEMPLATE=1",
            param="chat_template",
        )
    return req.chat_template


def template_kwargs(req: ChatCompletionRequest) -> dict[str, Any] | None:
    """The request's chat_template_kwargs, checked against the chat layer's allow-list."""
    return check_template_kwargs(req.chat_template_kwargs) or None
