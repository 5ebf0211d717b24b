"""Anthropic's Messages API on the chat layer: POST /v1/messages and /v1/messages/count_tokens.

A request becomes OpenAI-shaped chat messages (system first; thinking blocks as the assistant's
reasoning_content, tool_use blocks as its tool_calls, each tool_result as a `tool` message
ahead of the user's text), then goes through start_chat like /v1/chat/completions: the same
prompt, options table, stream filter, budgets and prefix cache. Errors have Anthropic's shape
(mlxd.server.error_responses).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from mlxd.chat.options import check_stop_count
from mlxd.errors import InvalidRequest
from mlxd.server.anthropic_schemas import (
    ContentBlock,
    CountTokensRequest,
    ImageBlock,
    MessageParam,
    MessagesRequest,
    TextBlock,
    ThinkingBlock,
    ToolChoiceAny,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlock,
    ToolUseBlock,
)
from mlxd.server.anthropic_wire import AnthropicWire
from mlxd.server.generation import respond, start_chat_stream
from mlxd.server.inputs import ChatInputs, ToolChoice, apply_tool_choice, parse
from mlxd.server.state import server_state

router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request) -> Response:
    st = server_state(request)
    start = time.perf_counter()
    req = parse(MessagesRequest, await request.body(), st.settings)
    check_stop_count(len(req.stop_sequences or []), param="stop_sequences")
    info = await st.models.get(req.model)
    stream = await start_chat_stream(st, info, req, chat_inputs(req))
    wire = AnthropicWire(model=info.name, prompt_tokens=stream.prompt.prompt_tokens)
    return await respond(request, st, stream, wire, req.stream, start)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The prompt tokens /v1/messages would prefill for the same conversation."""
    from mlxd.chat.session import chat_prompt

    st = server_state(request)
    req = parse(CountTokensRequest, await request.body(), st.settings)
    info = await st.models.get(req.model)
    inputs = chat_inputs(req)
    allow_urls = st.settings.allow_image_urls
    prompt = await asyncio.to_thread(
        lambda: chat_prompt(
            info, inputs.messages, inputs.tools, inputs.template_kwargs, None, allow_urls
        )
    )
    return JSONResponse({"input_tokens": prompt.prompt_tokens})


def chat_inputs(req: CountTokensRequest) -> ChatInputs:
    """(messages, tools, template_kwargs) for start_chat, honouring tool_choice."""
    messages: list[dict[str, Any]] = []
    system = req.system_text()
    if system is not None:
        messages.append({"role": "system", "content": system})
    called: set[str] = set()  # tool_use ids of the previous assistant turn
    for i, m in enumerate(req.messages):
        if m.role == "assistant":
            messages.append(_assistant(m, f"messages.{i}.content"))
            called = {b.id for b in m.blocks() if isinstance(b, ToolUseBlock)}
        else:
            messages += _user(m, called, f"messages.{i}.content")
            called = set()
    if req.messages[-1].role == "assistant":
        raise InvalidRequest(
            "the last message must be a user turn (continuing an assistant turn is not supported)",
            param=f"messages.{len(req.messages) - 1}.role",
        )
    tools = [t.to_chat() for t in req.tools] if req.tools else None
    return ChatInputs(messages, _tool_choice(req, messages, tools), req.template_kwargs())


def _tool_choice(
    req: CountTokensRequest, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, Any]] | None:
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceTool):
        return apply_tool_choice(messages, tools, ToolChoice.NAMED, choice.name)
    if isinstance(choice, ToolChoiceAny):
        return apply_tool_choice(messages, tools, ToolChoice.REQUIRED)
    if isinstance(choice, ToolChoiceNone):
        return apply_tool_choice(messages, tools, ToolChoice.NONE)
    return tools


def _assistant(m: MessageParam, where: str) -> dict[str, Any]:
    texts: list[dict[str, str]] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, b in enumerate(m.blocks()):
        if isinstance(b, TextBlock):
            texts.append({"type": "text", "text": b.text})
        elif isinstance(b, ThinkingBlock):
            reasoning.append(b.thinking)
        elif isinstance(b, ToolUseBlock):
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
