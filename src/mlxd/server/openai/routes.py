"""OpenAI's chat and text completions and its model list: /v1/chat/completions,
/v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from mlxd.chat.chat_request import MaxTokensPolicy
from mlxd.chat.options import ChatOptions
from mlxd.errors import InvalidRequest, ModelNotFound
from mlxd.server.generation import chat_endpoint, respond
from mlxd.server.openai.schemas import ChatCompletionRequest, CompletionRequest
from mlxd.server.openai.wire import ChatWire, CompletionWire
from mlxd.server.request_inputs import parse
from mlxd.server.served_models import DEFAULT_ALIASES, with_alias_hint
from mlxd.server.settings import ServerSettings
from mlxd.server.state import ServerState
from mlxd.server.state import server_state as _state

if TYPE_CHECKING:
    from mlxd.chat.session import ChatStream
    from mlxd.engine import ModelInfo

router = APIRouter()


@router.post("/v1/chat/completions")
async def chat_completions(request: Request) -> Response:
    read = partial(parse, ChatCompletionRequest)
    return await chat_endpoint(request, read, _wire, request_template)


def _wire(
    req: ChatCompletionRequest, info: ModelInfo, stream: ChatStream, st: ServerState
) -> ChatWire:
    texts = st.texts(info) if req.logprobs else None
    return ChatWire(model=info.name, texts=texts, include_usage=req.include_usage)


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


@router.post("/v1/completions")
async def completions(request: Request) -> Response:
    from mlxd.chat.session import start_completion

    st = _state(request)
    start = time.perf_counter()
    req = parse(CompletionRequest, await request.body(), st.settings)
    info = await st.models.get(req.model)
    options = ChatOptions.parse(req.options())
    stream = await asyncio.to_thread(
        start_completion, st.engine, info, req.prompt_text(), options, MaxTokensPolicy.HALF_WINDOW
    )
    texts = st.texts(info) if req.logprobs is not None else None
    wire = CompletionWire(model=info.name, texts=texts, include_usage=req.include_usage)
    return await respond(request, st, stream, wire, req.stream, start)


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    st = _state(request)
    ids = await st.models.list_ids()
    # OpenAI's list, with the page fields Anthropic's SDK reads (one page: no more to fetch).
    page = {"first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None}
    data = [st.models.card(i) for i in ids]
    return JSONResponse({"object": "list", "data": data, **page, "has_more": False})


@router.get("/v1/models/{model_id:path}")
async def get_model(request: Request, model_id: str) -> Response:
    st = _state(request)
    default = st.models.default
    model_id = st.models.aliased(model_id)
    if model_id in DEFAULT_ALIASES and default is not None:  # as "model": "default" does
        return JSONResponse(st.models.card(default.name))
    if not await st.models.exists(model_id):
        err = ModelNotFound(f"model '{model_id}' is not known", param="model")
        raise with_alias_hint(model_id, err)
    return JSONResponse(st.models.card(model_id))
