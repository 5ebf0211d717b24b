"""OpenAI's Responses API on the chat layer: POST /v1/responses.

`instructions` and the `input` items become OpenAI-shaped chat messages (a reasoning item
goes to the next assistant turn as reasoning_content, function_call items to its
tool_calls, each function_call_output is a `tool` message), then go through start_chat like
/v1/chat/completions: the same prompt, options table, stream filter, budgets and prefix cache.
Stateless: every request carries the whole conversation (responses.schemas).
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from starlette.responses import Response

from mlxd.server.generation import respond, start_chat_stream
from mlxd.server.request_inputs import parse
from mlxd.server.responses.inputs import chat_inputs
from mlxd.server.responses.schemas import ResponsesRequest
from mlxd.server.responses.wire import ResponsesWire
from mlxd.server.state import server_state

router = APIRouter()


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    st = server_state(request)
    start = time.perf_counter()
    req = parse(ResponsesRequest, await request.body(), st.settings)
    info = await st.models.get(req.model)
    stream = await start_chat_stream(st, info, req, chat_inputs(req))
    wire = ResponsesWire(model=info.name, request=req)
    return await respond(request, st, stream, wire, req.stream, start)
