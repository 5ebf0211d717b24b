"""OpenAI's Responses API on the chat layer: POST /v1/responses.

`instructions` and the `input` items become OpenAI-shaped chat messages (a reasoning item
goes to the next assistant turn as reasoning_content, function_call items to its
tool_calls, each function_call_output is a `tool` message), then go through start_chat like
/v1/chat/completions: the same prompt, options table, stream filter, budgets and prefix cache.
Stateless: every request carries the whole conversation (responses.schemas).
"""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Request
from starlette.responses import Response

from mlxd.server.generation import chat_endpoint
from mlxd.server.request_inputs import parse
from mlxd.server.responses.schemas import ResponsesRequest
from mlxd.server.responses.wire import ResponsesWire

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    return await chat_endpoint(
        request,
        partial(parse, ResponsesRequest),
        lambda req, info, stream, st: ResponsesWire(model=info.name, request=req),
    )
