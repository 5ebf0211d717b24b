"""Anthropic's Messages API on the chat layer: POST /v1/messages and /v1/messages/count_tokens.

A request becomes OpenAI-shaped chat messages (system first; thinking blocks as the assistant's
reasoning_content, tool_use blocks as its tool_calls, each tool_result as a `tool` message
ahead of the user's text), then goes through start_chat like /v1/chat/completions: the same
prompt, options table, stream filter, budgets and prefix cache. Errors have Anthropic's shape
(mlxd.server.error_responses).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from mlxd.chat.options import check_stop_count
from mlxd.server.anthropic.schemas import CountTokensRequest, MessagesRequest
from mlxd.server.anthropic.wire import AnthropicWire
from mlxd.server.generation import chat_endpoint
from mlxd.server.request_inputs import chat_request, parse
from mlxd.server.settings import ServerSettings
from mlxd.server.state import server_state

router = APIRouter()


@router.post("/v1/messages")
async def create_message(request: Request) -> Response:
    return await chat_endpoint(
        request,
        _read,
        lambda req, info, stream, st: AnthropicWire(
            model=info.name, prompt_tokens=stream.prompt.prompt_tokens
        ),
    )


def _read(body: bytes, settings: ServerSettings) -> MessagesRequest:
    req = parse(MessagesRequest, body, settings)
    check_stop_count(len(req.stop_sequences or []), param="stop_sequences")
    return req


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    """The prompt tokens /v1/messages would prefill for the same conversation."""
    from mlxd.chat.session import chat_prompt

    st = server_state(request)
    req = parse(CountTokensRequest, await request.body(), st.settings)
    info = await st.models.get(req.model)
    prompt = await asyncio.to_thread(chat_prompt, info, chat_request(req, st.settings))
    return JSONResponse({"input_tokens": prompt.prompt_tokens})
