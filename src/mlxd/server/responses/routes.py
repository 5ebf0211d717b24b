"""OpenAI's Responses API on the chat layer: POST /v1/responses.

`instructions` and the `input` items become OpenAI-shaped chat messages (a reasoning item
goes to the next assistant turn as reasoning_content, function_call items to its
tool_calls, each function_call_output is a `tool` message), then go through start_chat like
/v1/chat/completions: the same prompt, options table, stream filter, budgets and prefix cache.
Stateless: every request carries the whole conversation (responses.schemas).
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from starlette.responses import Response

from mlxd.server.generation import chat_endpoint
from mlxd.server.request_inputs import parse
from mlxd.server.responses.schemas import ResponsesRequest
from mlxd.server.responses.wire import ResponsesWire
from mlxd.server.settings import ServerSettings

router = APIRouter()
log = logging.getLogger("mlxd.server")


def read(body: bytes, settings: ServerSettings) -> ResponsesRequest:
    """The parsed request; the hosted tools it leaves out are logged (responses.tools)."""
    req = parse(ResponsesRequest, body, settings)
    dropped = req.flat_tools().dropped
    if dropped:
        log.warning(
            "/v1/responses: hosted tools dropped (mlxd cannot run them): %s", ", ".join(dropped)
        )
    return req


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    return await chat_endpoint(
        request,
        read,
        lambda req, info, stream, st: ResponsesWire(model=info.name, request=req),
    )
